# Load through the edge: /api/me and cart-page GETs (pass to the backends) from 4 threads;
# prints per-second counts of each status for DURATION seconds.
import http.client, sys, threading, time, collections
EDGE = ("127.0.0.1", 6281)
DURATION = float(sys.argv[1])
counts = collections.Counter()
lock = threading.Lock()
stop = time.time() + DURATION
def worker(i):
    conn = None
    paths = ["/api/me?recent=6", "/cart", "/items/%d" % (i + 1)]
    n = 0
    while time.time() < stop:
        try:
            if conn is None:
                conn = http.client.HTTPConnection(*EDGE, timeout=5)
            conn.request("GET", paths[n % 3])
            r = conn.getresponse(); r.read()
            st = r.status
        except Exception as e:
            st = "err"; conn = None
        n += 1
        with lock: counts[st] += 1
for i in range(4): threading.Thread(target=worker, args=(i,), daemon=True).start()
time.sleep(DURATION + 0.5)
print(dict(counts))
