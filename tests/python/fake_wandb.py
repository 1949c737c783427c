"""A fake W&B GraphQL endpoint for lachesis tests (stdlib only): every run asked for by display
name exists, finished, with a fixed summary and a history of 20 steps (sampled down to what is
asked). Runs in a thread of the caller.

    base_url, server = start()   # then WANDB_BASE_URL=base_url, any WANDB_API_KEY, WANDB_ENTITY=lab

Run as a program it serves until killed and prints its base URL on the first line; `--key NAME`
(repeatable) adds a metric the history logs, rising 0.01 a step, and `--extra-keys N` adds N
filler metrics (`aa/metric_00`, ...) that sort before most keys:

    python3 fake_wandb.py --extra-keys 20 --key zz/pass_rate
"""
import argparse
import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

SUMMARY = {"_step": 19, "train/reward_mean": 0.61, "train/percent_correct": 0.5, "train/loss": 0.12,
           "eval/percent_correct": 0.55}
HISTORY = [{"_step": i, "train/reward_mean": round(0.3 + i * 0.016, 3), "train/loss": round(1.0 - i * 0.04, 3)}
           for i in range(20)]


def answer(body):
    query = body.get("query", "")
    variables = body.get("variables") or {}
    if "LachesisHistory" in query:
        samples = 10
        for spec in variables.get("specs") or []:
            samples = json.loads(spec).get("samples", samples)
        stride = max(1, len(HISTORY) // max(1, samples))
        rows = HISTORY[::stride][:samples]
        return {"data": {"project": {"run": {"sampledHistory": [rows]}}}}
    display = json.loads(variables.get("filters") or "{}").get("display_name", "")
    node = {"name": "fake" + "".join(c for c in display if c.isalnum())[-8:], "displayName": display,
            "state": "finished", "summaryMetrics": json.dumps(SUMMARY),
            "historyKeys": json.dumps({"keys": {k: {} for k in HISTORY[0]}, "lastStep": 19})}
    return {"data": {"project": {"runs": {"edges": [{"node": node}]}}}}


class Handler(BaseHTTPRequestHandler):
    def do_POST(self):
        length = int(self.headers.get("content-length") or 0)
        try:
            body = json.loads(self.rfile.read(length) or b"{}")
        except json.JSONDecodeError:
            body = {}
        data = json.dumps(answer(body)).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


def start():
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return f"http://127.0.0.1:{server.server_address[1]}", server


def add_keys(names):
    """Every history row (and the run's history keys) gets each of `names`."""
    for name in names:
        for row in HISTORY:
            row[name] = round(0.2 + row["_step"] * 0.01, 3)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--key", action="append", default=[])
    parser.add_argument("--extra-keys", type=int, default=0)
    args = parser.parse_args()
    add_keys([f"aa/metric_{i:02}" for i in range(args.extra_keys)] + args.key)
    base, server = start()
    print(base, flush=True)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        sys.exit(0)
