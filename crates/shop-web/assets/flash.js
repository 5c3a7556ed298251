// Everything per-item and live on the sale page comes from the row cache
// (/api/inventory/{id}, refreshed from the database every second or so), so the
// page itself is the same for everyone and can be cached whole.
const money = c => '$' + (c / 100).toFixed(2);
const when = s => new Date(s * 1000).toLocaleTimeString();
async function refresh(li) {
  const r = await fetch('/api/inventory/' + li.dataset.item);
  if (!r.ok) { li.querySelector('.stock').textContent = 'unavailable'; return; }
  const row = await r.json();
  const now = Date.now() / 1000;
  const open = row.sale_start <= now && now < row.sale_end;
  li.querySelector('.title').textContent = row.title;
  li.querySelector('.price').textContent = row.sale_price_cents != null
    ? money(row.sale_price_cents) + ' (was ' + money(row.price_cents) + ')' : money(row.price_cents);
  li.querySelector('.stock').textContent = row.stock > 0 ? row.stock + ' left' : 'sold out';
  li.querySelector('.window').textContent = row.sale_start
    ? (open ? 'ends ' + when(row.sale_end) : 'starts ' + when(row.sale_start)) : '';
  li.querySelector('.buy').disabled = !(open && row.stock > 0);
}
async function buy(li) {
  const key = crypto.randomUUID ? crypto.randomUUID() : String(Math.random()).slice(2);
  const r = await fetch('/api/flash/' + li.dataset.item + '/buy', {
    method: 'POST', headers: { 'Idempotency-Key': key, Accept: 'application/json' } });
  const body = await r.json();
  li.querySelector('.result').textContent =
    r.status === 401 ? 'log in to buy' : (body.outcome || body.message).replace(/_/g, ' ');
  refresh(li);
}
for (const li of document.querySelectorAll('.sale-item')) {
  li.querySelector('.buy').addEventListener('click', () => buy(li));
  refresh(li);
  setInterval(() => refresh(li), 2000);
}
