# The site's part of shop.vcl: the shop's web servers, how Varnish tells they are
# up, and who may purge. An example for `shop serve` on 127.0.0.1:8080; copy it
# beside shop.vcl and list your own.

import directors;

probe shop_up {
    .url = "/healthz";
    .interval = 2s;
    .timeout = 1s;
    .window = 3;
    .threshold = 2;
}

backend web1 {
    .host = "127.0.0.1";
    .port = "8080";
    .probe = shop_up;
}

# The hosts that send `PURGE` (the shop's web servers and commands, with
# --edge-purge-url pointing here).
acl purgers {
    "127.0.0.1";
    "::1";
}

sub vcl_init {
    new web = directors.round_robin();
    web.add_backend(web1);
}

sub shop_backend {
    set req.backend_hint = web.backend();
}
