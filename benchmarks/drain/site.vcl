import directors;
probe shop_up {
    .url = "/healthz";
    .interval = 2s;
    .timeout = 1s;
    .window = 3;
    .threshold = 2;
}
backend web1 { .host = "127.0.0.1"; .port = "8711"; .probe = shop_up; }
backend web2 { .host = "127.0.0.1"; .port = "8713"; .probe = shop_up; }
acl purgers { "127.0.0.1"; "::1"; }
sub vcl_init {
    new web = directors.round_robin();
    web.add_backend(web1);
    web.add_backend(web2);
}
sub shop_backend { set req.backend_hint = web.backend(); }
