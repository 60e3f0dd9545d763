"""Checks of umpool-inspect serve, run by tests/test_inspect_serve.sh:

    check_serve.py PORT PID                 the holder's metrics are served
    check_serve.py PORT PID abuse           malformed, oversized and silent
                                            clients, 50 concurrent scrapes
    check_serve.py PORT PID churn           scrapes while the holder exits
    check_serve.py PORT PID gone            the holder has exited: it left
    check_serve.py PROMPORT PID query WANT  Prometheus reports WANT bytes

Prints one line per check; exits 1 on the first failure. Loopback only."""
import json
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
    else:
        query(port, pid, sys.argv[4])


if __name__ == "__main__":
    main()
