"""Stub inference server for lachesis tests (stdlib only, plus `tokenizers` for /generate).

Speaks the shapes atroposlib 0.4.0 uses: OpenAI `/v1/chat/completions`, `/v1/completions`,
`/v1/models`, `/health`, and `/generate` in both SGLang (`input_ids` + `sampling_params`) and vLLM
(`prompt.prompt_token_ids`) dialects.

Answers are deterministic: for a prompt containing "What is A op B?", choice i of a request answers
correctly when i is even and off by one when i is odd, so every group of two or more has mixed scores
(serve mode drops groups whose scores are all equal) and accuracy is exactly 50 %. Other prompts
(health checks send "hi") get "ok".

    python stub_inference.py --port 0 [--mode ok|hang] [--hang-model NAME]...   -> prints "READY <port>"

`--mode hang` accepts connections and never answers, to exercise client timeouts.
"""

import argparse
import json
import re
import sys
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

QUESTION = re.compile(r"What is (-?\d+) ([-+*]) (-?\d+)\?")
OPS = {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b}
LOGPROB = -0.25  # any value that is neither 0.0 nor 1.0 (trainers treat 1.0 as "prompt token")


def default_tokenizer_dir() -> Path:
    # venv.sh builds the tokenizer inside the venv, and this runs with the venv's python.
    return Path(sys.prefix) / "lachesis-tokenizer"


def answer_for(prompt: str, index: int) -> str:
    found = QUESTION.findall(prompt)
    if not found:
        return "ok"
    a, op, b = found[-1]
    value = OPS[op](int(a), int(b)) + (index % 2)
    return f"The answer is {value}."


class Tokenizer:
    """Lazily loaded so servers that never see /generate don't pay for it."""

    def __init__(self, directory: Path):
        self.directory = directory
        self._lock = threading.Lock()
        self._tok = None
        self.eos_id = None

    def _load(self):
        with self._lock:
            if self._tok is None:
                from tokenizers import Tokenizer as HfTokenizer

                tok = HfTokenizer.from_file(str(self.directory / "tokenizer.json"))
                config = json.loads((self.directory / "tokenizer_config.json").read_text("utf-8"))
                eos = config.get("eos_token")
                eos = eos.get("content") if isinstance(eos, dict) else eos
                self.eos_id = tok.token_to_id(eos) if eos else None
                self._tok = tok
        return self._tok

    def decode(self, ids):
        return self._load().decode(ids, skip_special_tokens=False)

    def encode_completion(self, text):
        # A real model ends its completion with EOS; the ids must decode back to `text`.
        ids = self._load().encode(text, add_special_tokens=False).ids
        return ids + ([self.eos_id] if self.eos_id is not None else [])


def make_server(host="127.0.0.1", port=0, mode="ok", model="stub", tokenizer_dir=None, hang_models=()):
    """Build (not start) the server; call serve_forever() or use serve_in_thread()."""
    tokenizer = Tokenizer(Path(tokenizer_dir) if tokenizer_dir else default_tokenizer_dir())
    never = threading.Event()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, fmt, *args):  # quiet: tests read stdout/stderr for other things
            pass

        def _send(self, status, payload):
            body = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def _body(self):
            length = int(self.headers.get("Content-Length") or 0)
            return json.loads(self.rfile.read(length) or b"{}")

        def do_GET(self):
            if mode == "hang":
                never.wait()
            path = self.path.split("?")[0].rstrip("/")
            if path == "/health":
                self._send(200, {"status": "ok"})
            elif path == "/v1/models":
                self._send(200, {"object": "list", "data": [
                    {"id": model, "object": "model", "created": 0, "owned_by": "lachesis-stub"}]})
            else:
                self._send(404, {"error": f"no route {path}"})

        def do_POST(self):
            if mode == "hang":
                never.wait()
            path = self.path.split("?")[0].rstrip("/")
            try:
                body = self._body()
                # A model whose endpoint never answers, while the others do (timeout tests).
                if "*" in hang_models or body.get("model") in hang_models:
                    never.wait()
                if path == "/v1/chat/completions":
                    self._send(200, chat_completions(body))
                elif path == "/v1/completions":
                    self._send(200, completions(body))
                elif path == "/generate":
                    self._send(200, generate(body))
                else:
                    self._send(404, {"error": f"no route {path}"})
            except Exception as e:  # a stub bug should surface as a 500, not a dropped socket
                self._send(500, {"error": f"{type(e).__name__}: {e}"})

    def usage(prompt, texts):
        p, c = len(prompt.split()), sum(len(t.split()) for t in texts)
        return {"prompt_tokens": p, "completion_tokens": c, "total_tokens": p + c}

    def envelope(kind, choices, prompt, texts):
        return {"id": f"{kind}-{uuid.uuid4().hex[:12]}", "object": kind, "created": int(time.time()),
                "model": model, "choices": choices, "usage": usage(prompt, texts)}

    def chat_completions(body):
        prompt = "\n".join(str(m.get("content") or "") for m in body.get("messages", []))
        texts = [answer_for(prompt, i) for i in range(int(body.get("n") or 1))]
        choices = [{"index": i, "message": {"role": "assistant", "content": t},
                    "finish_reason": "stop", "logprobs": None} for i, t in enumerate(texts)]
        return envelope("chat.completion", choices, prompt, texts)

    def completions(body):
        prompts = body.get("prompt", "")
        prompts = prompts if isinstance(prompts, list) else [prompts]
        n = int(body.get("n") or 1)
        texts, choices = [], []
        for p in prompts:
            for i in range(n):
                texts.append(answer_for(str(p), i))
                choices.append({"index": len(choices), "text": texts[-1],
                                "finish_reason": "stop", "logprobs": None})
        return envelope("text_completion", choices, " ".join(map(str, prompts)), texts)

    def generate(body):
        if "prompt" in body:  # vLLM: {"prompt": {"prompt_token_ids": [...]}, "n": N, ...}
            prompt = body["prompt"]
            ids = prompt.get("prompt_token_ids", []) if isinstance(prompt, dict) else None
            text = tokenizer.decode(ids) if ids is not None else str(prompt)
            answers = [answer_for(text, i) for i in range(int(body.get("n") or 1))]
            outs = [tokenizer.encode_completion(a) for a in answers]
            return {"text": answers,
                    "logprobs": [[[{str(t): LOGPROB}] for t in o] for o in outs],
                    "finish_reasons": ["stop"] * len(outs), "prompt_logprobs": None}
        # SGLang: {"input_ids": [...] | "text": "...", "sampling_params": {"n": N, ...}}
        ids = body.get("input_ids")
        text = tokenizer.decode(ids) if ids is not None else str(body.get("text", ""))
        n = int((body.get("sampling_params") or {}).get("n") or 1)
        results = []
        for i in range(n):
            answer = answer_for(text, i)
            out = tokenizer.encode_completion(answer)
            results.append({"text": answer, "meta_info": {
                "prompt_tokens": len(ids or []), "completion_tokens": len(out),
                "finish_reason": {"type": "stop"},
                "output_token_logprobs": [[LOGPROB, t, None] for t in out]}})
        return results[0] if n == 1 else results

    server = ThreadingHTTPServer((host, port), Handler)
    server.daemon_threads = True  # hung handlers must not keep the process alive
    return server


def serve_in_thread(server):
    thread = threading.Thread(target=server.serve_forever, name="stub-inference", daemon=True)
    thread.start()
    return thread


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=9004, help="0 picks a free port")
    parser.add_argument("--mode", choices=["ok", "hang"], default="ok")
    parser.add_argument("--model", default="stub", help="model id reported in responses")
    parser.add_argument("--hang-model", action="append", default=[],
                        help="requests naming this model are accepted and never answered (repeatable; * = every request)")
    parser.add_argument("--tokenizer", default=None,
                        help="tokenizer dir for /generate (default <sys.prefix>/lachesis-tokenizer)")
    args = parser.parse_args()
    server = make_server(args.host, args.port, args.mode, args.model, args.tokenizer, tuple(args.hang_model))
    print(f"READY {server.server_address[1]}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
