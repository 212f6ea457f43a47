"""llama.cpp's server (the `xllamacpp` wheel) behind a reloading front, for fulcrum's rollouts.

Run by scripts/llamacpp-server.sh in its own virtual environment. The front listens on
127.0.0.1:PORT and passes every request through to llama-server, which runs in a child process
of its own on a private port (this file run with --upstream). A child, not a thread of the
front: loading or freeing a model is native code, and a crash or a stall there must cost one
model (the reload fails, or the front exits saying why), never the front's own routes. A child
ends when its stdin does, so with its front however that ends. The front adds one route of its
own, because llama-server cannot swap its model while running:

  POST /reload_model {"model_path": "/abs/file.gguf", "weight_version": N}
      loads the file into a second llama-server, waits until it answers, sends new requests to
      it and stops the old one once its requests have finished. Answers
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
import os
import subprocess
import sys
import threading
import time


def log(msg):
    print(f"llamacpp-server: {msg}", file=sys.stderr, flush=True)


def exit_status(rc):
    return f"killed by signal {-rc}" if rc < 0 else f"exit status {rc}"


def child_env():
    """The environment of a llama-server child. llama.cpp's CPU threads wait in libgomp, which
    spins 300000 times before sleeping unless its process holds more threads than CPUs, when it
    spins 1000. It cannot see another process's threads: while a new model loads beside the one
    serving, the two children's full spins slowed both several-fold (on 2 cores: reloads of
    1-8 s instead of 0.5-0.9 s, a third of the completions). So 1000, which costs a lone server
    nothing measurable, unless the caller set libgomp's waiting itself."""
    env = dict(os.environ)
    if "GOMP_SPINCOUNT" not in env and "OMP_WAIT_POLICY" not in env:
        env["GOMP_SPINCOUNT"] = "1000"
    return env


class Upstream:
    """One llama-server in a child process, with a count of the requests it is serving."""

    def __init__(self, args, model_path, version, lora_path=None):
        spec = {
            "model": model_path,
            "lora": lora_path,
            "slots": args.slots,
            "ctx": args.ctx,
            "threads": args.threads,
            "verbosity": args.verbosity,
        }
        # stderr is the front's: llama.cpp's own log lines stay visible.
        self.proc = subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), "--upstream", json.dumps(spec)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=child_env(),
        )
        line = self.proc.stdout.readline()
        try:
            said = json.loads(line)
        except ValueError:
            said = {}
        if "address" not in said:
            self.proc.kill()
            rc = self.proc.wait()
            raise RuntimeError(said.get("error") or f"llama-server's process ended ({exit_status(rc)}) before it served")
        addr = said["address"].removeprefix("http://")
        self.host, port = addr.rsplit(":", 1)
        self.port = int(port)
        self.model_path = model_path
        self.version = version
        self.busy = 0

    def stop(self):
        # A kill, not a clean shutdown: the model's memory goes with the process, and nothing
        # in it is worth saving. The front's thread waiting on it reaps it.
        self.proc.kill()


def serve_upstream(spec):
    """The child (--upstream): one llama-server on a free loopback port. It says its address
    (or why the model did not load) on stdout as one JSON line, then serves until its stdin
    ends: the front closed it or died."""
    import xllamacpp

    p = xllamacpp.CommonParams()
    p.model.path = spec["model"]
    if spec["lora"] is not None:
        # A LoRA adapter GGUF applied to every request at scale 1 (llama.cpp scales it by the
        # file's adapter.lora.alpha over its rank).
        p.lora_adapters = [xllamacpp.CommonAdapterLoraInfo(spec["lora"], 1.0)]
    p.n_parallel = spec["slots"]
    p.n_ctx = spec["ctx"] * spec["slots"]
    p.cpuparams.n_threads = spec["threads"]
    p.cpuparams_batch.n_threads = spec["threads"]
    p.port = 0
    p.endpoint_metrics = True
    p.verbosity = spec["verbosity"]
    try:
        server = xllamacpp.Server(p)  # raises RuntimeError when the model does not load
    except RuntimeError as e:
        print(json.dumps({"error": str(e)}), flush=True)
        sys.exit(1)
    print(json.dumps({"address": server.listening_address}), flush=True)
    sys.stdin.buffer.read()
    # Straight out: no native teardown to stall in.
    os._exit(0)


class Front:
    def __init__(self, args):
        self.args = args
        self.lock = threading.Lock()
        self.reload_lock = threading.Lock()
        self.current = None
        self.make_current(Upstream(args, args.model, None))

    def make_current(self, new):
        """Sends new requests to `new`; the server it replaces stops once its requests are
        answered."""
        with self.lock:
            old, self.current = self.current, new
            idle = old is not None and old.busy == 0
        # Watched from the moment it serves: a process that has already ended is seen at once.
        reaper = threading.Thread(target=lambda: self.upstream_ended(new, exit_status(new.proc.wait())))
        reaper.daemon = True
        reaper.start()
        if idle:
            old.stop()

    def upstream_ended(self, up, status):
        # A replaced server ends when it is stopped (if it crashed first, its in-flight requests
        # got 502s). Serving 502s from a front whose model is gone would only hide it: end, so
        # that clients see the server down and a supervisor sees why.
        if up is self.current:
            log(f"llama-server serving {up.model_path} ended ({status}): stopping")
            os._exit(1)

    def acquire(self):
        with self.lock:
            up = self.current
            up.busy += 1
            return up

    def release(self, up):
        with self.lock:
            up.busy -= 1
            idle = up.busy == 0 and up is not self.current
        if idle:
            up.stop()

    def reload(self, model_path, version, lora_path=None):
        with self.reload_lock:
            t0 = time.time()
            self.make_current(Upstream(self.args, model_path, version, lora_path))
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
            conn = http.client.HTTPConnection(up.host, up.port, timeout=front.args.timeout)
            try:
                headers = {"Content-Type": self.headers.get("Content-Type", "application/json")}
                conn.request(self.command, self.path, body=data, headers=headers)
                resp = conn.getresponse()
                body = resp.read()
                extra = [("Content-Type", resp.getheader("Content-Type", "application/json"))]
                if up.version is not None:
                    extra.append(("X-Weight-Version", str(up.version)))
                self.reply(resp.status, body, extra)
            except (OSError, http.client.HTTPException) as e:
                self.reply_json(502, {"error": {"code": 502, "message": f"llama-server: {e}"}})
            finally:
                # Closed before the release, which may stop this llama-server.
                conn.close()
                front.release(up)

    return Handler


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--upstream":
        return serve_upstream(json.loads(sys.argv[2]))
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
