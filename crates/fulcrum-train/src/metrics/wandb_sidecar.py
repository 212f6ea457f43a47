# The W&B sidecar of `fulcrum train` (logging.wandb = true): W&B's own Python SDK logs the run;
# fulcrum feeds this process the records it writes to metrics.jsonl and eval.jsonl, one JSON
# object per line on stdin. It answers on stdout with lines that start with "fulcrum-wandb: "
# (anything else on stdout is the SDK's own and is ignored):
#   {"ready": true, "url": ...}  after wandb.init, or  {"error": "..."}  and exit 2;
#   {"finished": true}           after wandb.finish.
# Input lines: the first is {"init": {...wandb.init arguments...}}; then
#   {"step": N, "log": {...}, "histograms": {tag: [values]}}   run.log at step N,
#   {"finish": {"summary": {...}, "images": {name: path}}}     the end of the run.
import json
import os
import sys


def say(obj):
    sys.stdout.write("fulcrum-wandb: " + json.dumps(obj) + "\n")
    sys.stdout.flush()


def fail(msg):
    say({"error": msg})
    sys.exit(2)


def main():
    first = sys.stdin.readline()
    try:
        init = json.loads(first)["init"]
    except (ValueError, KeyError, TypeError):
        fail("the first line was not an init record")
    try:
        import wandb
    except ImportError as e:
        fail(f"the wandb package is not importable by {sys.executable} ({e}): pip install wandb")
    if init.get("mode") == "online":
        key = os.environ.get("WANDB_API_KEY")
        if not key:
            try:
                key = wandb.api.api_key
            except Exception:  # the SDK's own check; any failure reads as not logged in
                key = None
        if not key:
            fail("not logged in to W&B: run `wandb login` or set WANDB_API_KEY, "
                 "or set logging.wandb_mode = \"offline\"")
    try:
        run = wandb.init(**init)
    except Exception as e:  # every init failure is said to fulcrum, which stops at start
        fail(f"wandb.init failed: {type(e).__name__}: {e}")
    say({"ready": True, "url": getattr(run, "url", None)})
    for line in sys.stdin:
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if "finish" in rec:
            fin = rec["finish"] or {}
            for k, v in (fin.get("summary") or {}).items():
                run.summary[k] = v
            images = {k: wandb.Image(p) for k, p in (fin.get("images") or {}).items()
                      if os.path.isfile(p)}
            if images:
                run.log(images)
            break
        step = rec.get("step")
        data = dict(rec.get("log") or {})
        for tag, values in (rec.get("histograms") or {}).items():
            if values:
                data[tag] = wandb.Histogram(values)
        if data:
            run.log(data, step=step)
    run.finish()
    say({"finished": True})


main()
