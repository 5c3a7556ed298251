// Everything live on the sale page (stock, sale price, window) comes from Redis
// through /api/flash/events, one stream for every item: the server pushes each
// change, so "sold out" shows within a second; the page itself is the same for
// everyone and cached whole.
const money = c => '$' + (c / 100).toLocaleString('en-US', {minimumFractionDigits: 2, maximumFractionDigits: 2});
const when = s => new Date(s * 1000).toLocaleTimeString();
function show(li, sale) {
  const stock = li.querySelector('.stock');
  const buy = li.querySelector('.buy');
  if (!sale) { stock.textContent = 'not on sale'; buy.disabled = true; return; }
  const now = Date.now() / 1000;
  const open = sale.start <= now && now < sale.end;
  li.querySelector('.price').textContent =
    money(sale.price_cents) + ' (was ' + money(Number(li.dataset.priceCents)) + ')';
  stock.textContent = sale.stock > 0 ? sale.stock + ' left' : 'sold out';
  li.dataset.stock = sale.stock;
  li.querySelector('.window').textContent =
    now < sale.start ? 'starts ' + when(sale.start) : (open ? 'ends ' + when(sale.end) : 'ended');
  buy.disabled = !(open && sale.stock > 0);
}
async function buy(li) {
  const key = crypto.randomUUID ? crypto.randomUUID() : String(Math.random()).slice(2);
  const r = await fetch('/api/flash/' + li.dataset.item + '/buy', {
    method: 'POST', headers: { 'Idempotency-Key': key, Accept: 'application/json' } });
  const body = await r.json();
  li.querySelector('.result').textContent =
    r.status === 401 ? 'log in to buy' : (body.outcome || body.message).replace(/_/g, ' ');
}
const items = document.querySelectorAll('.sale-item');
for (const li of items) {
  li.querySelector('.buy').addEventListener('click', () => buy(li));
}
function follow() {
  const events = new EventSource('/api/flash/events');
  events.onmessage = e => {
    const sales = new Map(JSON.parse(e.data).map(s => [String(s.item_id), s]));
    for (const li of items) show(li, sales.get(li.dataset.item));
  };
  events.onerror = () => {
    for (const li of items) li.querySelector('.stock').textContent = 'reconnecting…';
    // A stream that ended reconnects by itself; one the server refused (503: it
    // holds all the streams it may) is closed for good, so try again later.
    if (events.readyState === EventSource.CLOSED) {
      setTimeout(follow, 5000 + Math.random() * 5000);
    }
  };
}
if (items.length > 0) follow();
