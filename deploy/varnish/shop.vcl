vcl 4.1;

# The shop behind Varnish 7 with the xkey vmod (Debian: varnish, varnish-modules).
#
# - Public pages (item pages, listings, the sale page, insights, static files,
#   product pictures) are the same bytes for everyone: they are cached whatever
#   cookie the browser sends. The cookie is removed from those requests only, and the origin is told
#   the request came through the edge (`Shop-Edge: 1`), so it leaves the view
#   count to the page's own `/api/me?item=` call; answers say so to the page's
#   script (`Server-Timing: edge`).
# - Everything else passes, cookie and all: /cart, /account, /api/me, forms,
#   admin, ops, every POST.
# - What is kept, and for how long, is the origin's word: only an answer marked
#   `Cache-Control: public`, for its `s-maxage`; served stale for its
#   `stale-while-revalidate` while it is fetched again, and for its
#   `stale-if-error` while the web servers are down (a probe says so).
#   A `Set-Cookie` is never kept nor handed on from a public page's fetch.
# - `Surrogate-Key` (the page's tags) is indexed by xkey; `PURGE /` with
#   `xkey-purge: <tags>`, from the `purgers` ACL only, drops every page with any
#   of them (the shop sends it: `--edge-purge-url`).
#
# The site's own part, the web servers, their probe and the purgers' ACL, is in
# `site.vcl` beside this file (an example is in the repository; `scripts/run
# --edge` and the tests write their own). It must define `sub shop_backend`
# (sets `req.backend_hint`) and `acl purgers`.

import std;
import xkey;

include "site.vcl";

sub vcl_recv {
    call shop_backend;
    if (req.method == "PURGE") {
        if (client.ip !~ purgers) {
            return (synth(403, "Forbidden"));
        }
        if (!req.http.xkey-purge) {
            return (synth(400, "PURGE needs xkey-purge: the tags to purge"));
        }
        set req.http.n-gone = xkey.purge(req.http.xkey-purge);
        return (synth(200, "Purged " + req.http.n-gone));
    }
    # Only this edge says a request came through the edge.
    unset req.http.Shop-Edge;
    # An HTTP/1.0 client may send no Host, but the edge's fetch is HTTP/1.1,
    # which must carry one (the shop answers 400 without): it names this edge.
    if (!req.http.Host) {
        set req.http.Host = "localhost";
    }
    if (req.restarts > 0 && req.http.Shop-Refetch) {
        # Past its stale-while-revalidate: a stale page is not served to a
        # client while the web servers answer (see vcl_hit).
        set req.grace = 0s;
    }
    if (req.method != "GET" && req.method != "HEAD") {
        return (pass);
    }
    if (req.url ~ "^/(items(/[0-9]+)?|c/[^/?]+|flash|api/items/[0-9]+/insights)(\?.*)?$"
        || req.url ~ "^/static/"
        || req.url ~ "^/pictures/"
        || req.url ~ "^/favicon\.ico$") {
        unset req.http.Cookie;
        unset req.http.Authorization;
        # The page is the same whatever name the client used for the site: the
        # fetch names this edge, so a `Host` the shop refuses (`a@b`) cannot
        # make the page's fetch fail for everyone (vcl_hash keys by the URL).
        set req.http.Host = "localhost";
        # One object per page: a query the shop does not read (`?x=<random>`)
        # neither makes a new object nor reaches the shop (nor does a `Host`:
        # vcl_hash). Listings read `after`, which the shop takes spelled only
        # as its links spell it (`after=24`, not `after=%32%34`).
        if (req.url ~ "^/(items|c/[^/?]+)\?" && req.url ~ "[?&]after=") {
            set req.url = regsub(req.url, "^([^?]*)\?(.*&)?(after=[^&]*).*$", "\1?\3");
        } else {
            set req.url = regsub(req.url, "\?.*$", "");
        }
        set req.http.Shop-Edge = "1";
        return (hash);
    }
    return (pass);
}

sub vcl_hash {
    # One object per page whatever `Host` the client sent (the built-in hash
    # adds it): the shop's pages do not depend on it, and a name made up per
    # request (`Host: x<random>.example`) would make a new object and reach the
    # shop each time.
    hash_data(req.url);
    return (lookup);
}

sub vcl_hit {
    # Past the page's stale-while-revalidate, and the web servers are up: fetch
    # it now rather than serve it stale (its stale-if-error is for when they are
    # down).
    if (obj.ttl <= 0s
        && obj.ttl + std.duration(obj.http.Shop-Swr, 0s) <= 0s
        && std.healthy(req.backend_hint)
        && req.restarts == 0) {
        set req.http.Shop-Refetch = "1";
        return (restart);
    }
}

sub vcl_backend_response {
    if (beresp.status >= 500 && bereq.is_bgfetch) {
        # A failed refresh keeps the stale copy (its grace), not the error.
        return (abandon);
    }
    if (!bereq.http.Shop-Edge) {
        return (deliver);
    }
    # A public page's fetch went without the browser's cookie: a cookie the
    # origin hands out here is no visitor's, and is never kept nor handed on.
    unset beresp.http.Set-Cookie;
    if (beresp.http.Cache-Control !~ "(^|,)\s*public\s*(,|$)"
        || beresp.http.Cache-Control ~ "no-cache|no-store|private") {
        # Not the same for everyone, or to be asked for every time: not kept
        # (hit-for-miss for a while).
        set beresp.uncacheable = true;
        set beresp.ttl = 10s;
        return (deliver);
    }
    # The TTL is the answer's s-maxage (Varnish reads it); the grace windows:
    set beresp.http.Shop-Swr = regsub(beresp.http.Cache-Control,
        "^.*stale-while-revalidate=([0-9]+).*$", "\1s");
    if (beresp.http.Shop-Swr !~ "^[0-9]+s$") {
        set beresp.http.Shop-Swr = "0s";
    }
    # An answer already past its windows when it comes (the shop serving a
    # page it kept, its `Age` beyond s-maxage and stale-while-revalidate,
    # while it cannot render it) is kept a moment: vcl_hit would fetch it
    # again for every request.
    if (beresp.ttl + std.duration(beresp.http.Shop-Swr, 0s) <= 0s) {
        set beresp.ttl = 10s;
    }
    set beresp.grace = std.duration(regsub(beresp.http.Cache-Control,
        "^.*stale-if-error=([0-9]+).*$", "\1s"), 0s);
    if (beresp.grace < std.duration(beresp.http.Shop-Swr, 0s)) {
        set beresp.grace = std.duration(beresp.http.Shop-Swr, 0s);
    }
    if (beresp.http.Surrogate-Key) {
        set beresp.http.xkey = beresp.http.Surrogate-Key;
    }
    return (deliver);
}

sub vcl_deliver {
    if (req.http.Shop-Edge) {
        # Tells the page's script that the shop did not count this view.
        if (obj.hits > 0) {
            set resp.http.Server-Timing = "edge;desc=hit";
        } else {
            set resp.http.Server-Timing = "edge;desc=miss";
        }
    }
    if (obj.hits > 0) {
        # What the shop's own cache did when this copy was fetched is no news.
        unset resp.http.X-Cache;
    }
    unset resp.http.xkey;
    unset resp.http.Shop-Swr;
    unset resp.http.Surrogate-Key;
}
