// Appends a link to each item ({id, title}) to the list `ul`.
function fillItemLinks(ul, items) {
  for (const item of items) {
    const li = document.createElement('li');
    const a = document.createElement('a');
    a.href = '/items/' + item.id;
    if (item.picture) {
      const img = document.createElement('img');
      img.src = item.picture;
      img.alt = '';
      img.width = img.height = 48;
      a.appendChild(img);
    }
    a.append(item.title);
    li.appendChild(a);
    ul.appendChild(li);
  }
}

// The per-user parts of every page (who is logged in, the cart, recently viewed
// items) come from /api/me, so the HTML of item pages is the same for everyone
// and can be cached whole. Fetched once; null if it could not be.
// An item page an edge cache served (it says so: `Server-Timing: edge`) was not
// counted by the shop: the call names the item, and the shop counts the view
// there. A page the shop served itself was counted already.
// It asks for only the recently viewed items it shows (RECENT_SHOWN, and the
// page's own item, left out below): the shop reads and sends no more.
const RECENT_SHOWN = 5;
function meUrl() {
  const me = '/api/me?recent=' + (RECENT_SHOWN + 1);
  const here = document.querySelector('article.item');
  if (!here || !performance.getEntriesByType) return me;
  const page = performance.getEntriesByType('navigation')[0];
  const fromEdge = page && page.serverTiming && page.serverTiming.some(t => t.name === 'edge');
  return fromEdge ? me + '&item=' + encodeURIComponent(here.dataset.item) : me;
}

const mePromise = (async function () {
  try {
    const r = await fetch(meUrl(), { headers: { Accept: 'application/json' } });
    return r.ok ? await r.json() : null;
  } catch (e) {
    return null;
  }
})();

// A new session (this visitor's first page):
// the page's view found no session to go in, so its item is named now, to be in
// the history the next page shows (the view was counted with the page).
(async function () {
  const me = await mePromise;
  const here = document.querySelector('article.item');
  if (!me || !me.new_session || !here) return;
  try {
    await fetch('/api/me?recent=0&seen=' + encodeURIComponent(here.dataset.item),
      { headers: { Accept: 'application/json' } });
  } catch (e) {
    // Only the history misses this page.
  }
})();

(async function () {
  const me = await mePromise;
  if (!me) return;
  const who = document.getElementById('who');
  // Degraded: who this is and what the cart holds are not known right now; no
  // count is shown (the page comes without one: it is the same for everyone),
  // and no "log in" is offered to who may be logged in.
  if (me.degraded) {
    who.hidden = true;
    return;
  }
  const count = document.getElementById('cart-count');
  count.textContent = me.cart.count;
  count.hidden = false;
  if (me.user) {
    who.textContent = '';
    const account = document.createElement('a');
    account.href = '/account';
    account.textContent = me.user.name;
    const form = document.createElement('form');
    form.method = 'post';
    form.action = '/logout';
    form.className = 'inline';
    const button = document.createElement('button');
    button.type = 'submit';
    button.textContent = 'Log out';
    form.appendChild(button);
    who.append(account, ' ', form);
  }
  const recent = document.getElementById('recent');
  const here = document.querySelector('article.item');
  const others = me.recently_viewed.filter(i => !here || String(i.id) !== here.dataset.item);
  if (recent && others.length) {
    fillItemLinks(recent.querySelector('ul'), others.slice(0, RECENT_SHOWN));
    recent.hidden = false;
  }
})();

// Item pages: what other shoppers did, carried by the page (#insights-data), or
// from /api/items/{id}/insights when the page came without them.
(async function () {
  const box = document.getElementById('insights');
  if (!box) return;
  let data;
  try {
    const inline = document.getElementById('insights-data');
    if (inline) {
      data = JSON.parse(inline.textContent);
    } else {
      const r = await fetch('/api/items/' + box.dataset.item + '/insights');
      if (!r.ok) return;
      data = await r.json();
    }
  } catch (e) {
    return;
  }
  // The share that bought it, with over how many shoppers, once there are enough.
  if (data.viewed_then_bought_text) {
    const p = document.createElement('p');
    p.className = 'viewed-bought';
    p.textContent = data.viewed_then_bought_text;
    box.appendChild(p);
  }
  // Also bought, best first, without what is already in this shopper's cart (if
  // /api/me answers within 2 s; else without leaving anything out).
  const me = await Promise.race([
    mePromise,
    new Promise(resolve => setTimeout(() => resolve(null), 2000)),
  ]);
  const inCart = new Set((me?.cart?.lines ?? []).map(l => l.item));
  const also = data.also_bought
    .filter(i => !inCart.has(i.id))
    .slice(0, data.also_bought_shown);
  if (!data.viewed_then_bought_text && !also.length) return;
  if (also.length) {
    const h = document.createElement('h2');
    h.textContent = 'Shoppers who bought this also bought';
    const ul = document.createElement('ul');
    ul.className = 'also-bought';
    fillItemLinks(ul, also);
    box.append(h, ul);
  }
  box.hidden = false;
})();

// An item in a flash sale: its page links the sale page instead of offering
// "Add to cart" until the sale ends, then offers it again (a page cached during
// the sale may still be served for a few minutes after).
(function () {
  const notice = document.getElementById('sale-notice');
  const form = document.getElementById('add-to-cart');
  if (!notice || !form) return;
  const reopen = () => {
    notice.hidden = true;
    form.hidden = false;
  };
  const left = Number(notice.dataset.saleEnd) * 1000 - Date.now();
  if (left <= 0) reopen();
  else if (left < 2 ** 31 - 1) setTimeout(reopen, left);
})();
