"""One bounded TCP stream between two hosts of bench/netns.sh, timed at the receiver.

    python3 bench/netns_tcp.py recv ADDR PORT          # listens on ADDR, prints one JSON line at EOF
    python3 bench/netns_tcp.py send ADDR PORT BYTES    # connects to ADDR (retrying for 30 s), sends BYTES
    python3 bench/netns_tcp.py pong ADDR PORT          # listens on ADDR, echoes one byte at a time
    python3 bench/netns_tcp.py ping ADDR PORT COUNT    # COUNT one-byte round trips, prints the median

The receiver's rate counts the bytes after the first read over the time from that read to the end of
the stream, so connection set-up and the sender's start are not in it. Every wait is bounded.
"""
import json
import socket
import sys
import time

CHUNK = 1 << 20


def receive(addr, port):
    with socket.socket() as server:
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        server.bind((addr, port))
        server.listen(1)
        server.settimeout(60)
        conn, peer = server.accept()
    with conn:
        conn.settimeout(60)
        buf = bytearray(CHUNK)
        total = first = conn.recv_into(buf)
        start = time.monotonic()
        while True:
            n = conn.recv_into(buf)
            if n == 0:
                break
            total += n
        seconds = time.monotonic() - start
        conn.sendall(b"k")  # the sender waits for this, so it leaves only after everything arrived
    rate = (total - first) / seconds if seconds > 0 else 0.0
    print(json.dumps({"peer": peer[0], "bytes": total, "seconds": round(seconds, 4),
                      "bytes_per_s": round(rate), "mbit_per_s": round(rate * 8 / 1e6, 1)}))


def connect(addr, port):
    deadline = time.monotonic() + 30
    while True:
        try:
            return socket.create_connection((addr, port), timeout=5)
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def accept_one(addr, port):
    with socket.socket() as server:
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        server.bind((addr, port))
        server.listen(1)
        server.settimeout(60)
        conn, _ = server.accept()
    conn.settimeout(60)
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return conn


def pong(addr, port):
    with accept_one(addr, port) as conn:
        while True:
            byte = conn.recv(1)
            if not byte:
                break
            conn.sendall(byte)


def ping(addr, port, count):
    with connect(addr, port) as conn:
        conn.settimeout(60)
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        rtts = []
        for _ in range(count):
            start = time.monotonic()
            conn.sendall(b"p")
            if conn.recv(1) != b"p":
                sys.exit("netns_tcp.py: the peer closed the connection")
            rtts.append(time.monotonic() - start)
    rtts.sort()
    print(json.dumps({"round_trips": count, "median_rtt_us": round(rtts[count // 2] * 1e6, 1),
                      "p10_rtt_us": round(rtts[count // 10] * 1e6, 1),
                      "p90_rtt_us": round(rtts[count * 9 // 10] * 1e6, 1)}))


def send(addr, port, nbytes):
    conn = connect(addr, port)
    with conn:
        conn.settimeout(120)
        chunk = memoryview(bytes(CHUNK))
        left = nbytes
        while left > 0:
            n = min(left, CHUNK)
            conn.sendall(chunk[:n])
            left -= n
        conn.shutdown(socket.SHUT_WR)
        conn.recv(1)


def main():
    role, addr, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
    if role == "recv":
        receive(addr, port)
    elif role == "send":
        send(addr, port, int(sys.argv[4]))
    elif role == "pong":
        pong(addr, port)
    elif role == "ping":
        ping(addr, port, int(sys.argv[4]))
    else:
        sys.exit(f"netns_tcp.py: expected recv, send, pong or ping, found {role!r}")


if __name__ == "__main__":
    main()
