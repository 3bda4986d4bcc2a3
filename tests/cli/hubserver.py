#!/usr/bin/env python3
"""A stand-in for the Hugging Face Hub on loopback, for `ruvllm pull`'s
tests (t0201-t0203): no test reaches the internet. Python's standard
library only.

    hubserver.py ROOT PORTFILE LOG [--cert CERT --key KEY]

ROOT/OWNER/REPO/PATH are the repositories' files. Served in the hub's
URL layout (checked against huggingface_hub and the hub's API docs):

  GET /api/models/OWNER/REPO/tree/main?recursive=true
      a JSON array of {"type": "file", "oid", "size", "path",
      "lfs": {"oid": SHA256, "size", "pointerSize"}} (directories as
      {"type": "directory"}); 404 {"error": "Repository not found"} for a
      repository ROOT does not hold. With ROOT/.page-size N the listing
      comes in pages of N entries, the next one named by a
      `Link: <URL>; rel="next"` header, as the hub paginates.
  GET /OWNER/REPO/resolve/main/PATH
      302 to /cdn/OWNER/REPO/PATH (as the hub redirects to its CDN); 404
      {"error": "Entry not found"} for a missing file.
  GET /cdn/OWNER/REPO/PATH
      the bytes, honouring "Range: bytes=N-" with 206 and Content-Range.

What the tests switch on, read at each request (so one server serves a
whole test):
  ROOT/.sha256-PATH-FLAT  a file whose text replaces the sha256 the listing
                          gives for that file (PATH with '/' as '_')
  ROOT/.cut N             the next download stops after N bytes (the
                          connection closed mid-body); the file is removed
                          so that the next download is whole
  ROOT/.norange           Range headers are ignored: 200 and the whole file
  ROOT/.slow              downloads send 64 KiB per 0.2 s
  ROOT/.missing           resolve/main answers 404 (a file listed, then gone)
LOG gets one line per request: method, path, Range and Authorization
headers.
"""
import hashlib
import json
import os
import socket
import ssl
import sys
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

ROOT, PORTFILE, LOG = sys.argv[1], sys.argv[2], sys.argv[3]
_hash_cache = {}


def sha256_of(path):
    st = os.stat(path)
    key = (path, st.st_size, st.st_mtime_ns)
    if key not in _hash_cache:
        h = hashlib.sha256()
        with open(path, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
        _hash_cache[key] = h.hexdigest()
    return _hash_cache[key]


def flag(name):
    return os.path.exists(os.path.join(ROOT, name))


class Hub(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args):
        pass

    def log_request_line(self):
        with open(LOG, "a") as f:
            f.write("%s %s range=%s auth=%s\n" % (
                self.command, self.path, self.headers.get("Range", "-"),
                self.headers.get("Authorization", "-")))

    def send_json(self, code, obj, extra=()):
        body = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        for k, v in extra:
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        self.log_request_line()
        url = urllib.parse.urlsplit(self.path)
        parts = [urllib.parse.unquote(p) for p in url.path.split("/")[1:]]
        if len(parts) >= 6 and parts[:2] == ["api", "models"] and parts[4:6] == ["tree", "main"]:
            return self.tree(parts[2], parts[3], urllib.parse.parse_qs(url.query))
        if len(parts) >= 5 and parts[2:4] == ["resolve", "main"]:
            repo = os.path.join(ROOT, parts[0], parts[1])
            path = "/".join(parts[4:])
            if not os.path.isfile(os.path.join(repo, path)) or flag(".missing"):
                return self.send_json(404, {"error": "Entry not found"})
            loc = "/cdn/%s/%s/%s" % (parts[0], parts[1], urllib.parse.quote(path))
            self.send_response(302)
            self.send_header("Location", loc)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        if len(parts) >= 4 and parts[0] == "cdn":
            return self.file(os.path.join(ROOT, *parts[1:]))
        self.send_json(404, {"error": "not found"})

    def tree(self, owner, name, query):
        repo = os.path.join(ROOT, owner, name)
        if not os.path.isdir(repo) or owner.startswith("."):
            return self.send_json(404, {"error": "Repository not found"})
        entries = []
        for dirpath, dirnames, filenames in os.walk(repo):
            dirnames.sort()
            rel_dir = os.path.relpath(dirpath, repo)
            for d in dirnames:
                entries.append({"type": "directory", "oid": "0" * 40,
                                "size": 0, "path": os.path.normpath(os.path.join(rel_dir, d))})
            for fn in sorted(filenames):
                p = os.path.join(dirpath, fn)
                rel = os.path.normpath(os.path.join(rel_dir, fn))
                size = os.path.getsize(p)
                sha = sha256_of(p)
                over = os.path.join(ROOT, ".sha256-" + rel.replace("/", "_"))
                if os.path.exists(over):
                    sha = open(over).read().strip()
                e = {"type": "file", "oid": hashlib.sha1(rel.encode()).hexdigest(),
                     "size": size, "path": rel}
                if fn.endswith(".gguf"):
                    e["lfs"] = {"oid": sha, "size": size, "pointerSize": 134}
                entries.append(e)
        extra = []
        ps = os.path.join(ROOT, ".page-size")
        if os.path.exists(ps):
            n = int(open(ps).read())
            start = int(query.get("cursor", ["0"])[0])
            if start + n < len(entries):
                nxt = "https://%s/api/models/%s/%s/tree/main?recursive=true&cursor=%d" % (
                    self.headers.get("Host"), owner, name, start + n)
                extra.append(("Link", '<%s>; rel="next"' % nxt))
            entries = entries[start:start + n]
        self.send_json(200, entries, extra)

    def file(self, path):
        if not os.path.isfile(path):
            return self.send_json(404, {"error": "Entry not found"})
        size = os.path.getsize(path)
        start = 0
        rng = self.headers.get("Range")
        if rng and not flag(".norange") and rng.startswith("bytes=") and rng.endswith("-"):
            start = int(rng[6:-1])
        cut = None
        cutf = os.path.join(ROOT, ".cut")
        if os.path.exists(cutf):
            cut = int(open(cutf).read())
            os.unlink(cutf)
        if start:
            self.send_response(206)
            self.send_header("Content-Range", "bytes %d-%d/%d" % (start, size - 1, size))
        else:
            self.send_response(200)
        self.send_header("Content-Length", str(size - start))
        self.send_header("Accept-Ranges", "bytes")
        self.end_headers()
        slow = flag(".slow")
        with open(path, "rb") as f:
            f.seek(start)
            sent = 0
            while True:
                chunk = f.read(65536)
                if not chunk:
                    break
                if cut is not None and sent + len(chunk) > cut:
                    self.wfile.write(chunk[:cut - sent])
                    self.wfile.flush()
                    self.close_connection = True
                    self.connection.shutdown(socket.SHUT_RDWR)
                    return
                try:
                    self.wfile.write(chunk)
                except (BrokenPipeError, ConnectionResetError):
                    return
                sent += len(chunk)
                if slow:
                    time.sleep(0.2)


def main():
    srv = ThreadingHTTPServer(("127.0.0.1", 0), Hub)
    srv.daemon_threads = True
    if "--cert" in sys.argv:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(sys.argv[sys.argv.index("--cert") + 1],
                            sys.argv[sys.argv.index("--key") + 1])
        srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
    tmp = PORTFILE + ".tmp"
    with open(tmp, "w") as f:
        f.write(str(srv.server_address[1]))
    os.rename(tmp, PORTFILE)
    srv.serve_forever()


main()
