"""llama.cpp's server (the `xllamacpp` wheel) behind a reloading front, for fulcrum's rollouts.

Run by scripts/llamacpp-server.sh in its own virtual environment. The front listens on
127.0.0.1:PORT and passes every request through to llama-server, which runs in this process on
a private port; it adds one route of its own, because llama-server cannot swap its model while
running:

  POST /reload_model {"model_path": "/abs/file.gguf", "weight_version": N}
      loads the file into a second llama-server, waits until it answers, sends new requests to
      it and closes the old one once its requests have finished. Answers
      {"success": true, "weight_version": N, "seconds": s}; on failure (unreadable file, wrong
      architecture) the old model keeps serving and the answer is an error with its reason.
  POST /reload_model {"lora_path": "/abs/adapter.gguf", "weight_version": N}
      the same with a LoRA adapter GGUF on the base file the server serves (or on "model_path"
      when given): a LoRA run's push writes only its adapter.
  GET /weight_version -> {"weight_version": N or null}

Every passed-through response carries `X-Weight-Version: N` once a reload has happened, so a
client can tell which weights produced each completion (a restarted server is back on the file it
was started with and has no version).
"""

import argparse
import http.client
import http.server
import json
import sys
import threading
import time

import xllamacpp


def log(msg):
    print(f"llamacpp-server: {msg}", file=sys.stderr, flush=True)


class Upstream:
    """One llama-server with a count of the requests it is serving."""

    def __init__(self, args, model_path, version, lora_path=None):
        p = xllamacpp.CommonParams()
        p.model.path = model_path
        if lora_path is not None:
            # A LoRA adapter GGUF applied to every request at scale 1 (llama.cpp scales it by
            # the file's adapter.lora.alpha over its rank).
            p.lora_adapters = [xllamacpp.CommonAdapterLoraInfo(lora_path, 1.0)]
        p.n_parallel = args.slots
        p.n_ctx = args.ctx * args.slots
        p.cpuparams.n_threads = args.threads
        p.cpuparams_batch.n_threads = args.threads
        p.port = 0
        p.endpoint_metrics = True
        p.verbosity = args.verbosity
        self.server = xllamacpp.Server(p)  # raises RuntimeError when the model does not load
        addr = self.server.listening_address.removeprefix("http://")
        self.host, port = addr.rsplit(":", 1)
        self.port = int(port)
        self.model_path = model_path
        self.version = version
        self.busy = 0
        self.retired = False

    def close(self):
        self.server = None  # ~Server stops its loop and frees the model


class Front:
    def __init__(self, args):
        self.args = args
        self.lock = threading.Condition()
        self.reload_lock = threading.Lock()
        self.current = Upstream(args, args.model, None)

    def acquire(self):
        with self.lock:
            up = self.current
            up.busy += 1
            return up

    def release(self, up):
        with self.lock:
            up.busy -= 1
            if up.retired and up.busy == 0:
                up.close()

    def reload(self, model_path, version, lora_path=None):
        with self.reload_lock:
            t0 = time.time()
            new = Upstream(self.args, model_path, version, lora_path)
            with self.lock:
                old, self.current = self.current, new
                old.retired = True
                if old.busy == 0:
                    old.close()
            secs = time.time() - t0
            what = model_path if lora_path is None else f"{lora_path} on {model_path}"
            log(f"weights v{version} from {what} in {secs:.2f} s")
            return secs


def handler(front):
    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, fmt, *a):
            if front.args.verbosity > 3:
                log(fmt % a)

        def reply(self, status, body, headers=()):
            self.send_response(status)
            for k, v in headers:
                self.send_header(k, v)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def reply_json(self, status, obj):
            self.reply(status, json.dumps(obj).encode(), [("Content-Type", "application/json")])

        def body(self):
            n = int(self.headers.get("Content-Length") or 0)
            return self.rfile.read(n) if n else b""

        def do_GET(self):
            if self.path == "/weight_version":
                return self.reply_json(200, {"weight_version": front.current.version})
            self.forward(None)

        def do_POST(self):
            data = self.body()
            if self.path == "/reload_model":
                return self.reload(data)
            self.forward(data)

        def reload(self, data):
            try:
                req = json.loads(data)
                version = int(req["weight_version"])
                # An adapter alone goes on the base file the server serves now.
                lora = req.get("lora_path")
                path = req["model_path"] if lora is None else req.get("model_path", front.current.model_path)
            except (ValueError, KeyError, TypeError) as e:
                return self.reply_json(400, {"error": {"code": 400, "message": f"bad reload request: {e}"}})
            try:
                secs = front.reload(path, version, lora)
            except RuntimeError as e:
                return self.reply_json(500, {"error": {"code": 500, "message": f"{path} did not load: {e}"}})
            self.reply_json(200, {"success": True, "weight_version": version, "seconds": secs})

        def forward(self, data):
            up = front.acquire()
            try:
                conn = http.client.HTTPConnection(up.host, up.port, timeout=front.args.timeout)
                headers = {"Content-Type": self.headers.get("Content-Type", "application/json")}
                conn.request(self.command, self.path, body=data, headers=headers)
                resp = conn.getresponse()
                body = resp.read()
                extra = [("Content-Type", resp.getheader("Content-Type", "application/json"))]
                if up.version is not None:
                    extra.append(("X-Weight-Version", str(up.version)))
                self.reply(resp.status, body, extra)
                conn.close()
            except (OSError, http.client.HTTPException) as e:
                self.reply_json(502, {"error": {"code": 502, "message": f"llama-server: {e}"}})
            finally:
                front.release(up)

    return Handler


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model")
    ap.add_argument("port", type=int)
    ap.add_argument("--slots", type=int, default=4, help="sequences decoded together (llama-server --parallel)")
    ap.add_argument("--ctx", type=int, default=2048, help="context tokens per slot")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=900, help="seconds one request may take")
    ap.add_argument("--verbosity", type=int, default=1)
    args = ap.parse_args()
    try:
        front = Front(args)
    except RuntimeError as e:
        log(f"{args.model}: the model did not load: {e}")
        sys.exit(1)
    try:
        srv = http.server.ThreadingHTTPServer(("127.0.0.1", args.port), handler(front))
    except OSError as e:
        log(f"cannot listen on 127.0.0.1:{args.port}: {e}")
        sys.exit(1)
    srv.daemon_threads = True
    log(f"serving {args.model} on http://127.0.0.1:{srv.server_address[1]} "
        f"({args.slots} slots x {args.ctx} tokens, {args.threads} threads)")
    try:
        srv.serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
