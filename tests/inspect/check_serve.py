"""Checks of umpool-inspect serve, run by tests/test_inspect_serve.sh:

    check_serve.py PORT PID                 the holder's metrics are served
    check_serve.py PORT PID abuse           malformed, oversized and silent
                                            clients, 50 concurrent scrapes
    check_serve.py PORT PID trickle         130 clients trickling their
                                            headers (a byte every 4 s,
                                            reconnecting when dropped):
                                            every scrape answered within
                                            3 s, each trickler dropped
                                            by the request deadline
    check_serve.py PORT PID nearlimit SPID  127 silent connections (SPID:
                                            serve's pid), then 10 scrapes
                                            in a row, every one answered
    check_serve.py PORT PID churn           scrapes while the holder exits
    check_serve.py PORT PID gone            the holder has exited: it left
    check_serve.py PROMPORT PID query WANT  Prometheus reports WANT bytes
    check_serve.py PROMPORT PID traffic TIER N COLL
                                            Prometheus's link counters:
                                            TIER bytes device 0 to host
                                            (cause tier); COLL bytes on each
                                            of N devices' links to each
                                            other (cause coll), no other;
                                            one allreduce
    check_serve.py PROMPORT PID dashboard EXPRS
                                            every expression of the
                                            dashboard (EXPRS: title TAB expr
                                            lines) evaluates; those not of
                                            the GPU gauges have data
    check_serve.py PORT PID documented README [PAGE...]
                                            every family of the page (and
                                            of the PAGE files) is in README
    check_serve.py PORT PID nogpus          no NVML: no GPU gauge at all,
                                            pid's pool metrics served
    check_serve.py PORT PID gpus N FAIL OUT NVML is the fake (N devices,
                                            GPU FAIL's first temperature
                                            query fails; pid holds a pool
                                            on the fake driver): exact
                                            gauges; pages in OUT.1, OUT.2

Prints one line per check; exits 1 on the first failure. Loopback only."""
import json
import os
import re
import socket
import sys
import threading
import time
import urllib.error
import urllib.request

HOST = "127.0.0.1"


def fail(msg):
    print("FAIL: " + msg)
    sys.exit(1)


def get(port, path="/metrics", method="GET"):
    req = urllib.request.Request("http://%s:%d%s" % (HOST, port, path),
                                 method=method)
    try:
        with urllib.request.urlopen(req, timeout=20) as r:
            return r.status, r.headers.get("Content-Type", ""), r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.headers.get("Content-Type", ""), e.read()


def live_bytes(page, pid):
    """The sum of umpool_live_bytes over the devices of pid's pools."""
    total, seen = 0, False
    for line in page.decode().splitlines():
        if line.startswith("umpool_live_bytes{") and \
                ('pid="%s"' % pid) in line:
            total += int(float(line.rsplit(" ", 1)[1]))
            seen = True
    return total if seen else None


def raw(port, data, read=True):
    """Sends data on a fresh connection; what comes back (b"" when the
    server just closed)."""
    s = socket.create_connection((HOST, port), timeout=20)
    try:
        s.sendall(data)
        if not read:
            return s
        out = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            out += chunk
        return out
    finally:
        if read:
            s.close()


def served(port, pid):
    st, ctype, body = get(port)
    if st != 200 or not ctype.startswith("text/plain"):
        fail("/metrics: %d %s" % (st, ctype))
    b = live_bytes(body, pid)
    if not b:
        fail("/metrics has no umpool_live_bytes of pid %s" % pid)
    if b"umpool_exporter_up 1" not in body:
        fail("/metrics: umpool_exporter_up is not 1")
    st, ctype, body = get(port, "/")
    if st != 200 or b'href="/metrics"' not in body:
        fail("/: %d, no link to /metrics" % st)
    st, _, body = get(port, "/metrics", "HEAD")
    if st != 200 or body:
        fail("HEAD /metrics: %d with %d bytes of body" % (st, len(body)))
    for path, want in (("/nope", 404), ("/metrics/x", 404)):
        st, _, _ = get(port, path)
        if st != want:
            fail("%s: %d, expected %d" % (path, st, want))
    st, _, _ = get(port, "/metrics", "POST")
    if st != 405:
        fail("POST /metrics: %d, expected 405" % st)
    print("served: pid %s live %d bytes; / links /metrics; HEAD, 404, 405"
          % (pid, b))
    print(b)


def abuse(port, pid):
    # Not HTTP at all: an error status or a close, and the server goes on.
    out = raw(port, b"\x00\x01garbage\r\n\r\n")
    if out and not out.startswith(b"HTTP/1.1 4"):
        fail("garbage got %r" % out[:40])
    # A request line and headers far over the exporter's limit (16 KiB).
    big = b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 100000 + \
        b"\r\n\r\n"
    try:
        out = raw(port, big)
    except (ConnectionResetError, BrokenPipeError):
        out = b""
    if out and not out.startswith(b"HTTP/1.1 4"):
        fail("an oversized request got %r" % out[:40])
    # A client that says nothing holds its own connection only.
    silent = raw(port, b"GET /metr", read=False)
    t0 = time.time()
    st, _, body = get(port)
    if st != 200 or time.time() - t0 > 5:
        fail("a scrape next to a silent client: %d after %.1f s"
             % (st, time.time() - t0))
    silent.close()
    # 50 scrapes at once.
    results = []

    def one():
        try:
            s, _, b = get(port)
            results.append(s == 200 and live_bytes(b, pid) is not None)
        except Exception as e:  # noqa: BLE001 - any failure is a result
            results.append(e)
    threads = [threading.Thread(target=one) for _ in range(50)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if results.count(True) != 50:
        fail("50 concurrent scrapes: %d right, others %r"
             % (results.count(True), [r for r in results if r is not True]))
    print("abuse: garbage, a 100 KB request, a silent client and 50 "
          "concurrent scrapes left it serving")


# The exporter's limits (tools/inspect/inspect_serve.c): CONN_MAX
# connections; a request must be read whole within REQUEST_TIMEOUT_S of
# its connection's accept.
CONN_MAX = 128
REQUEST_TIMEOUT_S = 5


def scrape_ok(port, timeout, took=None):
    """None when /metrics answers a whole page within timeout, else why;
    the seconds it took appended to the list took."""
    t0 = time.time()
    try:
        req = urllib.request.Request("http://%s:%d/metrics" % (HOST, port))
        with urllib.request.urlopen(req, timeout=timeout) as r:
            st, body = r.status, r.read()
    except Exception as e:  # noqa: BLE001 - any failure is the answer
        return "%r after %.1f s" % (e, time.time() - t0)
    if took is not None:
        took.append(time.time() - t0)
    if st != 200 or b"umpool_exporter_up" not in body:
        return "%d, %d bytes" % (st, len(body))
    return None


def trickle(port, pid):
    """130 clients, 2 more than the exporter's connections, each sending
    "GET /metrics HTTP/1.1\r\nX-a: " and then one byte every 4 s (about
    33 bytes/s in all: never silent for the 10 s that MHD's timeout
    waits), and reconnecting at once when dropped, as an attacker would.
    For 10 s a scrape every 0.5 s must be answered within 3 s (less than
    the request deadline: a slot is kept for it, it does not wait for a
    trickler's deadline), and no trickling connection may live much past
    the request deadline."""
    n, every, run, tick = 130, 4.0, 10.0, 0.2
    head = b"GET /metrics HTTP/1.1\r\nX-a: "
    stop = threading.Event()
    stats = {"dropped": 0, "longest": 0.0, "error": None}
    conns = []  # [socket, opened at, next byte at]

    def connect(now, phase):
        s = socket.create_connection((HOST, port), timeout=5)
        s.sendall(head)
        s.setblocking(False)
        return [s, now, now + phase]

    def closed(s):
        """True when the server closed s (what it sent is dropped)."""
        try:
            while True:
                if not s.recv(65536):
                    return True
        except BlockingIOError:
            return False
        except OSError:
            return True

    def trickler():
        try:
            for i in range(n):
                conns.append(connect(time.time(), every * i / n))
            while not stop.is_set():
                now = time.time()
                for c in conns:
                    gone = closed(c[0])
                    if not gone and now >= c[2]:
                        c[2] += every
                        try:
                            c[0].send(b"a")
                        except OSError:
                            gone = True
                    if gone:
                        c[0].close()
                        stats["dropped"] += 1
                        stats["longest"] = max(stats["longest"], now - c[1])
                        c[:] = connect(now, every)
                stop.wait(tick)
        except Exception as e:  # noqa: BLE001 - reported by the main thread
            stats["error"] = e

    t = threading.Thread(target=trickler)
    t.start()
    failed, n_scrapes, took = [], 0, []
    t0 = time.time()
    time.sleep(0.5)
    while time.time() - t0 < run:
        why = scrape_ok(port, 3, took)
        n_scrapes += 1
        if why:
            failed.append("at %.1f s: %s" % (time.time() - t0, why))
        time.sleep(0.5)
    stop.set()
    t.join()
    now = time.time()
    for c in conns:
        stats["longest"] = max(stats["longest"], now - c[1])
        c[0].close()
    if stats["error"]:
        fail("trickle: the trickling clients failed: %r" % stats["error"])
    if failed:
        fail("trickle: %d of %d scrapes failed next to 130 trickling "
             "clients; first %s" % (len(failed), n_scrapes, failed[0]))
    if stats["longest"] > REQUEST_TIMEOUT_S + 2.5:
        fail("trickle: a trickling connection lived %.1f s (request "
             "deadline %d s)" % (stats["longest"], REQUEST_TIMEOUT_S))
    print("trickle: %d scrapes answered in %.0f s next to 130 trickling "
          "clients (the slowest in %.2f s); the tricklers dropped %d times, "
          "none connected more than %.1f s"
          % (n_scrapes, run, max(took), stats["dropped"], stats["longest"]))


def server_sockets(spid):
    """How many sockets the process spid has open."""
    count = 0
    for fd in os.listdir("/proc/%d/fd" % spid):
        try:
            if os.readlink("/proc/%d/fd/%s" % (spid, fd)).startswith(
                    "socket:"):
                count += 1
        except OSError:
            pass  # closed meanwhile
    return count


def wait_sockets(spid, want, what):
    """Until the process spid has want sockets open (5 s)."""
    for _ in range(100):
        got = server_sockets(spid)
        if got == want:
            return
        time.sleep(0.05)
    fail("%s: serve has %d sockets open, expected %d" % (what, got, want))


def keepalive_scrape(port):
    """None when an HTTP/1.1 request that does not ask to close (as
    Prometheus sends) is answered, and the server then closes the
    connection by itself, releasing its slot; else why."""
    s = socket.create_connection((HOST, port), timeout=3)
    out = b""
    try:
        s.sendall(b"GET /metrics HTTP/1.1\r\nHost: %s:%d\r\n\r\n"
                  % (HOST.encode(), port))
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            out += chunk
    except socket.timeout:
        return "the connection still open 3 s after %d bytes" % len(out)
    except OSError as e:
        return "%r after %d bytes" % (e, len(out))
    finally:
        s.close()
    if not out.startswith(b"HTTP/1.1 200") or b"umpool_exporter_up" not in out:
        return "%r... (%d bytes)" % (out[:40], len(out))
    return None


def nearlimit(port, pid, spid):
    """127 silent connections, one short of the exporter's 128, then 10
    scrapes in a row, alternately by a client that closes at once and by
    one that waits for the server to close: every one is answered (the
    scrape before it no longer counts)."""
    wait_sockets(spid, 1, "nearlimit, before")  # only the listening one
    silent = [socket.create_connection((HOST, port), timeout=5)
              for _ in range(CONN_MAX - 1)]
    t0 = time.time()
    try:
        wait_sockets(spid, CONN_MAX, "nearlimit, 127 silent clients")
        failed = []
        for i in range(10):
            why = keepalive_scrape(port) if i % 2 else scrape_ok(port, 5)
            if why:
                failed.append("scrape %d: %s" % (i + 1, why))
        took = time.time() - t0
    finally:
        for s in silent:
            s.close()
    if failed:
        fail("nearlimit: %d of 10 scrapes next to 127 silent connections "
             "failed: %s" % (len(failed), "; ".join(failed)))
    print("nearlimit: 10 scrapes in a row answered next to 127 silent "
          "connections (%.1f s%s)" % (took, "" if took < REQUEST_TIMEOUT_S
                                      else ", slower than the request "
                                      "deadline: not a test of the limit"))


def churn(port, pid):
    """Scrapes for 2 s while the holder exits: every page whole."""
    for _ in range(40):
        st, _, body = get(port)
        if st != 200 or b"umpool_exporter_scrapes_total" not in body:
            fail("a scrape while pid %s exited: %d, %d bytes"
                 % (pid, st, len(body)))
        time.sleep(0.05)
    print("churn: 40 scrapes while pid %s exited, each whole" % pid)


def gone(port, pid):
    for _ in range(100):
        st, _, body = get(port)
        if st != 200:
            fail("/metrics after the holder exited: %d" % st)
        if live_bytes(body, pid) is None:
            print("gone: pid %s left /metrics once it exited" % pid)
            return
        time.sleep(0.1)
    fail("pid %s still on /metrics 10 s after it exited" % pid)


def query(port, pid, want):
    q = 'sum(umpool_live_bytes{pid="%s"})' % pid
    url = "http://%s:%d/api/v1/query?query=%s" % (
        HOST, port, urllib.request.quote(q))
    last = None
    for _ in range(120):
        try:
            with urllib.request.urlopen(url, timeout=5) as r:
                last = json.load(r)
            res = last["data"]["result"]
            if res:
                got = int(float(res[0]["value"][1]))
                if got != int(want):
                    fail("Prometheus says %d live bytes, the exporter %s"
                         % (got, want))
                print("prometheus: %s = %d (the exporter's figure)" % (q, got))
                return
        except (urllib.error.URLError, ConnectionError, KeyError):
            pass
        time.sleep(0.5)
    fail("Prometheus had no %s after 60 s (last answer %r)" % (q, last))


def prom_api(port, q):
    """Prometheus's answer to instant query q: (status, result)."""
    url = "http://%s:%d/api/v1/query?query=%s" % (
        HOST, port, urllib.request.quote(q))
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            ans = json.load(r)
        return ans.get("status"), ans.get("data", {}).get("result", [])
    except urllib.error.HTTPError as e:
        return "error: %s" % e.read().decode(errors="replace"), []
    except (urllib.error.URLError, ConnectionError):
        return "unreachable", []


def prom_wait(port, q, ok):
    """Query q until ok(result) holds (60 s at most); the last result."""
    res = []
    for _ in range(120):
        st, res = prom_api(port, q)
        if st == "success" and ok(res):
            return res
        time.sleep(0.5)
    fail("Prometheus: %s gave %r" % (q, res))


def traffic(port, pid, tier, n, coll):
    q = ('umpool_link_bytes_total{pid="%s",src="0",dst="host",cause="tier"}'
         % pid)
    res = prom_wait(port, q, lambda r: len(r) == 1)
    got = int(float(res[0]["value"][1]))
    if got != tier:
        fail("%s = %d, the holder moved %d" % (q, got, tier))
    print("prometheus: %s = %d" % (q, got))
    q = 'umpool_link_bytes_total{pid="%s",cause="coll"} > 0' % pid
    res = prom_wait(port, q, lambda r: len(r) > 0)
    links = {(r["metric"]["src"], r["metric"]["dst"]):
             int(float(r["value"][1])) for r in res}
    want = {(str(a), str(b)): coll for a in range(n) for b in range(n)
            if a != b}
    if links != want:
        fail("%s: %r, expected %r" % (q, sorted(links.items()),
                                      sorted(want.items())))
    print("prometheus: %s: %d links of %d bytes each" % (q, len(links), coll))
    q = 'umpool_collective_calls_total{pid="%s",op="allreduce"}' % pid
    res = prom_wait(port, q, lambda r: len(r) == 1)
    if int(float(res[0]["value"][1])) != 1:
        fail("%s = %r, the holder made one call" % (q, res))
    print("prometheus: %s = 1" % q)
    q = ('sum by (src, dst) (umpool_link_bytes_total{pid="%s"}) / on (src, '
         'dst) umpool_link_bandwidth_bytes_per_second{pid="%s"}' % (pid, pid))
    res = prom_wait(port, q, lambda r: len(r) > 0)
    print("prometheus: bytes over bandwidth answers %d links" % len(res))


def dashboard(port, exprs):
    lines = [l.rstrip("\n").split("\t", 1) for l in open(exprs) if "\t" in l]
    if not lines:
        fail("no expressions in %s" % exprs)
    empty = []
    for title, q in lines:
        st, res = prom_api(port, q)
        if st != "success":
            fail("dashboard panel %r: %s: %s" % (title, q, st))
        if not res:
            empty.append((title, q))
    # Without NVML the GPU gauges are absent, as they should be.
    wrong = [t for t, q in empty if "umpool_gpu_" not in q]
    if wrong:
        fail("dashboard panels without data: %r" % wrong)
    print("dashboard: %d expressions evaluated, %d with data, %d without "
          "(the GPU gauges: no NVML here)" % (len(lines), len(lines) - len(empty),
                                              len(empty)))


def documented(port, readme, pages):
    st, _, body = get(port)
    if st != 200:
        fail("/metrics: %d" % st)
    texts = [body.decode()] + [open(p).read() for p in pages]
    names = set()
    for t in texts:
        names |= set(re.findall(r"^# HELP (umpool_\w+) ", t, re.M))
    doc = open(readme).read()
    missing = sorted(n for n in names if "`%s`" % n not in doc)
    if missing:
        fail("README.md does not list %s" % ", ".join(missing))
    print("documented: the %d metric families served are in README.md"
          % len(names))


GPU_GAUGES = {
    "umpool_gpu_utilization_ratio":
        "Fraction of the last sample period a kernel ran on the GPU (NVML)",
    "umpool_gpu_memory_utilization_ratio":
        "Fraction of the last sample period device memory was read or "
        "written (NVML)",
    "umpool_gpu_temperature_celsius": "GPU core temperature (NVML)",
}
SAMPLE = re.compile(r'^([a-z_]+)\{(.*)\} (\S+)$')
LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)",?')


def samples(page, name):
    """[(labels dict, value)] of metric name on the page."""
    out = []
    for line in page.decode().splitlines():
        m = SAMPLE.match(line)
        if m and m.group(1) == name:
            labels = dict(LABEL.findall(m.group(2)))
            out.append((labels, float(m.group(3))))
    return out


def nogpus(port, pid):
    st, _, body = get(port)
    if st != 200:
        fail("/metrics: %d" % st)
    for name in GPU_GAUGES:
        if name.encode() in body:
            fail("no NVML, yet the page names %s" % name)
    if not live_bytes(body, pid):
        fail("no NVML: /metrics has no umpool_live_bytes of pid %s" % pid)
    print("nogpus: no GPU gauge without NVML; pid %s's pool served" % pid)


def fake_gpu(d):
    """The fake NVML's device d (tests/fake_cuda.c): labels, then the
    values of the three gauges."""
    return ({"gpu": str(d), "pci_bus_id": "0000:%02x:00.0" % (0x1a + 0x10 * d),
             "uuid": "GPU-00000000-0000-0000-0000-0000000000%02x" % d},
            {"umpool_gpu_utilization_ratio": (10 + d) / 100,
             "umpool_gpu_memory_utilization_ratio": (20 + d) / 100,
             "umpool_gpu_temperature_celsius": 40 + d})


def gpus_page(body, n, missing):
    """Every gauge of every GPU but missing's temperature, exactly."""
    text = body.decode()
    for name, help_ in GPU_GAUGES.items():
        if "# HELP %s %s\n# TYPE %s gauge\n" % (name, help_, name) \
                not in text:
            fail("%s: no HELP and TYPE as expected" % name)
        got = samples(body, name)
        want = []
        for d in range(n):
            labels, values = fake_gpu(d)
            if not (d == missing and name.endswith("_celsius")):
                want.append((labels, values[name]))
        if len(got) != len(want):
            fail("%s: %d series, expected %d: %r"
                 % (name, len(got), len(want), got))
        for (gl, gv), (wl, wv) in zip(got, want):
            if gl != wl or abs(gv - wv) > 1e-9:
                fail("%s: %r %r, expected %r %r" % (name, gl, gv, wl, wv))


def gpus(port, pid, n, failgpu, out):
    pages = []
    for i, missing in enumerate((failgpu, -1)):
        st, _, body = get(port)
        if st != 200:
            fail("/metrics: %d" % st)
        gpus_page(body, n, missing)
        with open("%s.%d" % (out, i + 1), "wb") as f:
            f.write(body)
        pages.append(body)
    # A PromQL join on(pci_bus_id) pairs each device of pid's pool (on the
    # fake driver, whose bus ids the fake NVML shares) with its GPU.
    gpu_pci = {l["pci_bus_id"]
               for l, _ in samples(pages[1], "umpool_gpu_temperature_celsius")}
    dev_pci = {l["pci_bus_id"]
               for l, _ in samples(pages[1], "umpool_device_info")
               if l.get("pid") == pid}
    if not dev_pci or dev_pci != gpu_pci:
        fail("pid %s's devices on %r, the GPU gauges on %r"
             % (pid, sorted(dev_pci), sorted(gpu_pci)))
    print("gpus: %d GPUs, 3 gauges each, exact; GPU %d's failed temperature "
          "left out of the first page only; pid %s's devices join on "
          "pci_bus_id %s" % (n, failgpu, pid, ",".join(sorted(gpu_pci))))


def main():
    port, pid = int(sys.argv[1]), sys.argv[2]
    what = sys.argv[3] if len(sys.argv) > 3 else "served"
    if what == "served":
        served(port, pid)
    elif what == "abuse":
        abuse(port, pid)
    elif what == "gone":
        gone(port, pid)
    elif what == "churn":
        churn(port, pid)
    elif what == "trickle":
        trickle(port, pid)
    elif what == "nearlimit":
        nearlimit(port, pid, int(sys.argv[4]))
    elif what == "nogpus":
        nogpus(port, pid)
    elif what == "gpus":
        gpus(port, pid, int(sys.argv[4]), int(sys.argv[5]), sys.argv[6])
    elif what == "traffic":
        traffic(port, pid, int(sys.argv[4]), int(sys.argv[5]),
                int(sys.argv[6]))
    elif what == "dashboard":
        dashboard(port, sys.argv[4])
    elif what == "documented":
        documented(port, sys.argv[4], sys.argv[5:])
    else:
        query(port, pid, sys.argv[4])


if __name__ == "__main__":
    main()
