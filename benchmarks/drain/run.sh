#!/usr/bin/env bash
# A restart behind Varnish, one round: two `shop serve` (ports 8711, 8713, one
# SQLite file, their own redis-server on 6471) behind Varnish on 6281 with
# site.vcl beside this script (deploy/varnish/shop.vcl's probe), 4 threads
# loading /api/me, /cart and an item page through it for 20 s (load.py), and
# the second server restarted (SIGTERM, started again) 5 s in, with DRAIN
# seconds of `--drain-seconds`. Prints the load's answers by status.
#   benchmarks/drain/run.sh 0; benchmarks/drain/run.sh 5   (BIN=target/release/shop)
set -u
DRAIN=$1
HERE="$(cd "$(dirname "$0")" && pwd)"
BIN="${BIN:-$HERE/../../target/release/shop}"
WORK="$(mktemp -d)"
cp "$HERE/load.py" "$HERE/site.vcl" "$WORK/"
cd "$WORK"
export SHOP_UNCACHED_PER_ADDRESS=100000 SHOP_COUNTED_VIEWS_PER_ADDRESS=100000
export REDIS_URL=redis://127.0.0.1:6471 DATABASE_URL=sqlite://$WORK/shop.db
redis-cli -p 6471 ping >/dev/null 2>&1 || redis-server --port 6471 --save '' --appendonly no --daemonize yes >/dev/null
serve() { $BIN serve --bind 127.0.0.1:$1 --no-workers --drain-seconds $DRAIN --shutdown-grace 5 "${@:2}" >>$WORK/web$1.log 2>&1 & echo $!; }
w1=$(serve 8711 --demo --demo-items 1000)
until curl -sf http://127.0.0.1:8711/healthz >/dev/null; do sleep 0.2; done
w2=$(serve 8713)
until curl -sf http://127.0.0.1:8713/healthz >/dev/null; do sleep 0.2; done
cp "$HERE/../../deploy/varnish/shop.vcl" "$WORK/"
varnishd -F -j none -n "$WORK/varnish" -a 127.0.0.1:6281 -T none -f "$WORK/shop.vcl" -p vcl_path="$WORK" -s malloc,64m >"$WORK/varnish.log" 2>&1 &
vp=$!
until curl -sf http://127.0.0.1:6281/healthz >/dev/null; do sleep 0.2; done
sleep 5
python3 load.py 20 > "$WORK/counts" &
lp=$!
sleep 5
kill -TERM $w2; while kill -0 $w2 2>/dev/null; do sleep 0.05; done
w2=$(serve 8713)
wait $lp
cat "$WORK/counts"
kill -TERM $w1 $w2 $vp; wait 2>/dev/null
redis-cli -p 6471 shutdown nosave >/dev/null 2>&1
