// Everything live on the sale page (stock, sale price, window) comes from Redis
// through /api/flash/events, one stream for every item: the server pushes each
// change, so "sold out" shows within a second; the page itself is the same for
// everyone and cached whole.
const money = c => '$' + (c / 100).toLocaleString('en-US', {minimumFractionDigits: 2, maximumFractionDigits: 2});
// A time today as a time; another day's with its date ("ends Dec 8, 2:59 PM").
const when = s => {
  const at = new Date(s * 1000);
  return at.toDateString() === new Date().toDateString()
    ? at.toLocaleTimeString()
    : at.toLocaleString(undefined, {dateStyle: 'medium', timeStyle: 'short'});
};
// "1:02:03" or "2:03" from seconds.
const clock = s => {
  const h = Math.floor(s / 3600), m = Math.floor(s / 60) % 60, sec = Math.floor(s) % 60;
  const two = n => String(n).padStart(2, '0');
  return h ? h + ':' + two(m) + ':' + two(sec) : m + ':' + two(sec);
};
const sales = new Map();
function show(li, sale) {
  const stock = li.querySelector('.stock');
  const buy = li.querySelector('.buy');
  sales.set(li.dataset.item, sale);
  if (!sale) { stock.textContent = 'not on sale'; buy.disabled = true; tick(li); return; }
  const now = Date.now() / 1000;
  const open = sale.start <= now && now < sale.end;
  li.querySelector('.price').textContent =
    money(sale.price_cents) + ' (was ' + money(Number(li.dataset.priceCents)) + ')';
  stock.textContent = sale.stock > 0 ? sale.stock + ' left' : 'sold out';
  li.dataset.stock = sale.stock;
  // The bar: what is left of the units the sale had when the page was drawn.
  const units = Math.max(Number(li.dataset.units) || 0, sale.stock, 1);
  li.querySelector('.stock-bar .left').style.width = (100 * sale.stock / units) + '%';
  li.querySelector('.stock-bar').setAttribute('aria-label', sale.stock + ' of ' + units + ' left');
  li.querySelector('.window').textContent =
    now < sale.start ? 'starts ' + when(sale.start) : (open ? 'ends ' + when(sale.end) : 'ended');
  tick(li);
}
// The countdown to the sale's start or end, every second.
function tick(li) {
  const sale = sales.get(li.dataset.item);
  const countdown = li.querySelector('.countdown');
  if (!sale) { countdown.textContent = ''; return; }
  const now = Date.now() / 1000;
  countdown.textContent = now < sale.start ? 'starts in ' + clock(sale.start - now)
    : now < sale.end ? 'ends in ' + clock(sale.end - now) : 'ended';
  // The button opens and closes with the window, between the server's events.
  li.querySelector('.buy').disabled = !(sale.start <= now && now < sale.end && sale.stock > 0);
}
async function buy(li) {
  const key = crypto.randomUUID ? crypto.randomUUID() : String(Math.random()).slice(2);
  // The price shown: a sale started again at another price meanwhile sells
  // nothing (409 price_changed) and the page shows the new one.
  const sale = sales.get(li.dataset.item);
  const price = sale ? '?price_cents=' + sale.price_cents : '';
  const result = li.querySelector('.result');
  let r;
  let body = {};
  try {
    r = await fetch('/api/flash/' + li.dataset.item + '/buy' + price, {
      method: 'POST', headers: { 'Idempotency-Key': key, Accept: 'application/json' } });
    body = await r.json().catch(() => ({}));
  } catch (e) {
    result.textContent = 'not sent: try again';
    return;
  }
  result.textContent = '';
  if (r.status === 401) {
    // A guest: to the login page, and back here after it.
    const login = document.createElement('a');
    login.href = '/login?next=/flash';
    login.textContent = 'Log in to buy';
    result.append(login);
    return;
  }
  result.textContent = (body.outcome || body.message || 'failed (' + r.status + ')').replace(/_/g, ' ');
}
const items = document.querySelectorAll('.sale-item');
for (const li of items) {
  li.querySelector('.buy').addEventListener('click', () => buy(li));
}
function follow() {
  const events = new EventSource('/api/flash/events');
  events.onmessage = e => {
    const latest = new Map(JSON.parse(e.data).map(s => [String(s.item_id), s]));
    for (const li of items) show(li, latest.get(li.dataset.item));
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
if (items.length > 0) {
  follow();
  setInterval(() => { for (const li of items) tick(li); }, 1000);
}
