"""Checks `lachesis mcp` against the reference RL tools, with the official MCP Python SDK.

    python conformance.py LACHESIS_BIN ENV_NAME [--provider URL] [--server-type TYPE]
                          [--api-key-env NAME] [--models M1,M2] [--workflow demo]
                          [--golden reference_keys.json] [--test-timeout SECONDS]
                          [--test-extra JSON] [--fake-wandb] [--server-args "mcp --no-daemon"]

LACHESIS_HOME, LACHESIS_ENV_DIRS, LACHESIS_PYTHON, ... are inherited from the environment; the home
should be fresh (no environment selected yet) and have a daemon running on it, so runs start.

Drives every tool through every answer the golden file (reference_keys.json) describes: the
no-environment errors, list/select (unknown, a vanished file, known), config, edits (locked,
unknown, valid), start (missing Tinker key, demo workflow), status (normal, rate limited, unknown),
list, stop (unknown, running, ended), results (known, unknown) and the inference test (missing
provider key, then num_steps 1 against --provider). Each answer is checked against the golden
schema: every golden key present with the golden type (extra keys are fine) plus the golden value
checks. Prints a per-tool report, then one JSON line {"ok", "mismatches", "notes", "answers"};
exits 1 on any mismatch.
"""
import argparse
import asyncio
import json
import os
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

HERE = Path(__file__).resolve().parent
TERMINAL = {"stopped", "completed", "failed", "cancelled", "canceled"}
UNKNOWN_ID = "ffffffff"


# ---------------------------------------------------------------------------------------------
# Schema checking


def type_ok(value, type_names):
    for name in type_names.split("|"):
        name = name.strip()
        if name == "any":
            return True
        if name == "null" and value is None:
            return True
        if name == "string" and isinstance(value, str):
            return True
        if name == "boolean" and isinstance(value, bool):
            return True
        if name == "integer" and isinstance(value, int) and not isinstance(value, bool):
            return True
        if name == "number" and isinstance(value, (int, float)) and not isinstance(value, bool):
            return True
        if name == "object" and isinstance(value, dict):
            return True
        if name == "array" and isinstance(value, list):
            return True
    return False


def describe(value):
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


def check_schema(value, schema, path, out):
    """Appends (kind, path, expected, got) for every way `value` falls short of `schema`."""
    if isinstance(schema, str):
        if not type_ok(value, schema):
            out.append(("type", path or "(answer)", schema, describe(value)))
        return
    if isinstance(schema, list):
        if not isinstance(value, list):
            out.append(("type", path or "(answer)", "array", describe(value)))
            return
        if schema:
            for i, item in enumerate(value):
                check_schema(item, schema[0], f"{path}[{i}]", out)
        return
    # an object schema
    if not isinstance(value, dict):
        out.append(("type", path or "(answer)", "object", describe(value)))
        return
    named = set()
    for raw_key, sub in schema.items():
        if raw_key == "*":
            continue
        optional = raw_key.endswith("?")
        key = raw_key[:-1] if optional else raw_key
        named.add(key)
        where = f"{path}.{key}" if path else key
        if key not in value:
            if not optional:
                out.append(("missing", where, schema_text(sub), None))
            continue
        check_schema(value[key], sub, where, out)
    if "*" in schema:
        for key, sub_value in value.items():
            if key not in named:
                check_schema(sub_value, schema["*"], f"{path}.{key}" if path else key, out)


def schema_text(schema):
    if isinstance(schema, str):
        return schema
    if isinstance(schema, list):
        return "array"
    return "object"


def normalise(path):
    """runs[3].status -> runs[].status, so one problem in every item is reported once."""
    return re.sub(r"\[\d+\]", "[]", path)


def select(value, at):
    """The objects (with their paths) an `at` expression of the golden checks names."""
    found = [(value, "")]
    if not at:
        return found
    for part in at.split("."):
        suffix = ""
        while part.endswith("[]") or part.endswith("{}"):
            suffix = part[-2:] + suffix
            part = part[:-2]
        step = []
        for obj, path in found:
            if not isinstance(obj, dict) or part not in obj:
                continue
            step.append((obj[part], f"{path}.{part}" if path else part))
        for marker in [suffix[i:i + 2] for i in range(0, len(suffix), 2)]:
            nxt = []
            for obj, path in step:
                if marker == "[]" and isinstance(obj, list):
                    nxt.extend((item, f"{path}[{i}]") for i, item in enumerate(obj))
                elif marker == "{}" and isinstance(obj, dict):
                    nxt.extend((item, f"{path}.{k}") for k, item in obj.items())
            step = nxt
        found = step
    return found


SAFE = {"len": len, "sum": sum, "min": min, "max": max, "any": any, "all": all, "abs": abs,
        "round": round, "list": list, "range": range, "round3": lambda x: round(x, 3),
        "True": True, "False": False, "None": None}


def run_checks(answer, tool, case, checks, out):
    schema_problems = any(kind in ("missing", "type") for kind, *_ in out)
    for check in checks:
        if check["tool"] != tool or check["case"] != case:
            continue
        for obj, path in select(answer, check.get("at", "")):
            where = path or "(answer)"
            if "regex" in check:
                if not isinstance(obj, str):
                    continue  # the schema check has reported the wrong type
                if not re.search(check["regex"], obj):
                    out.append(("check", where, f"{check['id']}: matches {check['regex']}", obj))
                continue
            names = dict(obj) if isinstance(obj, dict) else {}
            names["root"] = answer
            try:
                # names as globals, so comprehensions in the expression see them; the golden file is ours
                passed = bool(eval(check["expr"], {**names, "__builtins__": SAFE}))
                detail = None
            except Exception as e:  # a missing key or a wrong type already reported above
                passed, detail = False, f"{type(e).__name__}: {e}"
            if detail and schema_problems:
                continue  # the expression needs a key or type the schema check found wrong
            if not passed:
                got = detail or {k: v for k, v in names.items() if k != "root" and re.search(
                    rf"\b{re.escape(k)}\b", check["expr"])}
                out.append(("check", where, f"{check['id']}: {check['expr']}", got))


# ---------------------------------------------------------------------------------------------
# Driving the server


class Conformance:
    def __init__(self, session, golden, args):
        self.session = session
        self.golden = golden
        self.args = args
        self.answers = {}  # step -> {"tool", "arguments", "case", "answer"}
        self.mismatches = []
        self.notes = []
        self.counts = {}  # tool -> answers checked

    async def call(self, step, tool, arguments=None, timeout=120.0, progress=None):
        """Calls a tool; never raises. The answer is the parsed JSON text (or what came instead).
        With a `progress` list, the call asks for progress notifications and appends each one."""
        arguments = arguments or {}

        async def on_progress(done, total, message):
            progress.append({"progress": done, "total": total, "message": message})

        try:
            callback = on_progress if progress is not None else None
            result = await asyncio.wait_for(
                self.session.call_tool(tool, arguments, progress_callback=callback), timeout)
            texts = [c.text for c in (result.content or []) if getattr(c, "text", None) is not None]
            text = texts[0] if texts else ""
            try:
                answer = json.loads(text)
            except (json.JSONDecodeError, TypeError):
                answer = {"_not_json": text}
            if getattr(result, "isError", False) or getattr(result, "is_error", False):
                if isinstance(answer, dict):
                    answer.setdefault("_is_error", True)
        except asyncio.TimeoutError:
            answer = {"_exception": f"no answer within {timeout:.0f}s"}
        except Exception as e:  # a protocol error, an unknown tool, a dead server...
            answer = {"_exception": f"{type(e).__name__}: {e}"}
        self.answers[step] = {"tool": tool, "arguments": arguments, "answer": answer}
        return answer

    def check(self, step, case):
        """Checks the answer recorded for `step` against the golden `case` of its tool."""
        entry = self.answers[step]
        tool, answer = entry["tool"], entry["answer"]
        entry["case"] = case
        self.counts[tool] = self.counts.get(tool, 0) + 1
        schema = self.golden["tools"][tool]["cases"][case]["schema"]
        found = []
        if isinstance(answer, dict) and ("_exception" in answer or "_not_json" in answer):
            found.append(("call", "(answer)", "a JSON object", answer.get("_exception") or answer.get("_not_json")))
        else:
            check_schema(answer, schema, "", found)
            run_checks(answer, tool, case, self.golden.get("checks", []), found)
        seen = set()
        for kind, path, expected, got in found:
            key = (kind, normalise(path), expected)
            if key in seen:
                continue
            seen.add(key)
            self.mismatches.append({"tool": tool, "case": case, "step": step, "kind": kind,
                                    "path": normalise(path), "expected": expected, "got": got})
        return answer

    def note(self, step, text):
        self.notes.append({"step": step, "note": text})

    async def cleanup_run(self, step, answer):
        """A run the reference would have refused was queued: stop it so it doesn't linger."""
        if isinstance(answer, dict) and answer.get("run_id") and "error" not in answer:
            await self.call(step + "_cleanup_stop", "rl_stop_training", {"run_id": str(answer["run_id"])})
            self.note(step, f"a run was queued ({answer['run_id']}); stopped it")

    async def wait_run(self, step, run_id, done, deadline_s):
        """Polls rl_list_runs (rl_check_status is rate limited) until done(status) or the deadline."""
        end = time.monotonic() + deadline_s
        status = None
        while time.monotonic() < end:
            listing = await self.call(step, "rl_list_runs")
            runs = listing.get("runs") if isinstance(listing, dict) else None
            for run in runs or []:
                if isinstance(run, dict) and str(run.get("run_id")) == str(run_id):
                    status = run.get("status")
            if status is not None and done(status):
                return status
            await asyncio.sleep(0.05)
        return status

    # -----------------------------------------------------------------------------------------

    async def tools(self):
        listed = (await self.session.list_tools()).tools
        schema = lambda t: getattr(t, "input_schema", None) or getattr(t, "inputSchema", None) or {}
        by_name = {t.name: schema(t) for t in listed}
        self.answers["list_tools"] = {"tool": "(list_tools)", "answer": by_name}
        for tool, spec in self.golden["tools"].items():
            if tool not in by_name:
                self.mismatches.append({"tool": tool, "case": "arguments", "step": "list_tools", "kind": "missing",
                                        "path": "(tool)", "expected": "tool listed", "got": None})
                continue
            props = by_name[tool].get("properties") or {}
            required = set(by_name[tool].get("required") or [])
            for arg, want in spec["arguments"].items():
                got = props.get(arg)
                problem = None
                if got is None:
                    problem = ("missing", f"arguments.{arg}", want["type"], None)
                else:
                    types = json_types(got)
                    if want["type"] != "any" and types and want["type"] not in types:
                        problem = ("type", f"arguments.{arg}", want["type"], sorted(types))
                    elif want.get("required") and arg not in required:
                        problem = ("check", f"arguments.{arg}", "required", "optional")
                    elif "default" in want and got.get("default") != want["default"]:
                        problem = ("check", f"arguments.{arg}.default", want["default"], got.get("default"))
                if problem:
                    kind, path, expected, value = problem
                    self.mismatches.append({"tool": tool, "case": "arguments", "step": "list_tools", "kind": kind,
                                            "path": path, "expected": expected, "got": value})

    async def scenario(self, env_name, gone_dir):
        a = self.args
        await self.tools()
        await self.call("health", "rl_health_check")

        # --- Before any selection: the no-environment errors (needs a fresh home).
        config = await self.call("config_no_env", "rl_get_current_config")
        if isinstance(config, dict) and "error" not in config and "environment" in config:
            self.note("config_no_env", "an environment was already selected in this home: the no-environment "
                      "cases were not exercised (use a fresh LACHESIS_HOME)")
            fresh = False
        else:
            fresh = True
        if fresh:
            self.check("config_no_env", "no_environment")
            await self.call("edit_no_env", "rl_edit_config", {"field": "group_size", "value": 8})
            self.check("edit_no_env", "no_environment")
            start = await self.call("start_no_env", "rl_start_training", {"workflow": a.env_workflow})
            self.check("start_no_env", "no_environment")
            await self.cleanup_run("start_no_env", start)
            # A deliberate difference: a workflow that runs no environment starts without one.
            start = await self.call("start_no_env_needed", "rl_start_training", {"workflow": a.workflow})
            if not (isinstance(start, dict) and start.get("run_id") and "error" not in start):
                self.mismatches.append({"tool": "rl_start_training", "case": "no_environment_needed",
                                        "step": "start_no_env_needed", "kind": "check", "path": "run_id",
                                        "expected": "a queued run", "got": start})
            await self.cleanup_run("start_no_env_needed", start)
            await self.call("test_no_env", "rl_test_inference", self.test_args(), timeout=a.test_timeout)
            self.check("test_no_env", "no_environment")

        # --- Environments.
        envs = await self.call("list_environments", "rl_list_environments")
        self.check("list_environments", "ok")
        await self.call("select_unknown", "rl_select_environment", {"name": "no-such-environment-xyz"})
        self.check("select_unknown", "unknown_environment")

        env_file = None
        for env in (envs.get("environments") or []) if isinstance(envs, dict) else []:
            if isinstance(env, dict) and env.get("name") == env_name:
                env_file = env.get("file_path")
        if env_file is None:
            self.note("list_environments", f"environment {env_name!r} was not listed")

        # --- A selected environment whose file then vanishes: start must refuse.
        gone_name = await self.make_gone_env(env_file, gone_dir)
        if gone_name:
            sel = await self.call("select_gone", "rl_select_environment", {"name": gone_name})
            if isinstance(sel, dict) and "error" not in sel:
                for path in Path(gone_dir).glob("*.py"):
                    path.unlink()
                start = await self.call("start_env_file_missing", "rl_start_training", {"workflow": a.workflow})
                self.check("start_env_file_missing", "environment_file_missing")
                await self.cleanup_run("start_env_file_missing", start)
            else:
                self.note("select_gone", "could not select the copied environment; environment_file_missing not exercised")
        else:
            self.note("select_gone", "could not copy the environment file; environment_file_missing not exercised")

        # --- Select and configure.
        await self.call("select", "rl_select_environment", {"name": env_name})
        self.check("select", "ok")
        config = await self.call("config", "rl_get_current_config")
        self.check("config", "ok")
        configurable, locked = [], []
        if isinstance(config, dict):
            configurable = [f.get("name") for f in config.get("configurable_fields") or [] if isinstance(f, dict)]
            locked = [f.get("name") for f in config.get("locked_fields") or [] if isinstance(f, dict)]
        locked_field = "total_steps" if "total_steps" in locked or not locked else locked[0]
        await self.call("edit_locked", "rl_edit_config", {"field": locked_field, "value": 5})
        self.check("edit_locked", "locked_field")
        await self.call("edit_unknown", "rl_edit_config", {"field": "no_such_field_xyz", "value": 1})
        self.check("edit_unknown", "unknown_field")
        field = "group_size" if "group_size" in configurable or not configurable else configurable[0]
        await self.call("edit", "rl_edit_config", {"field": field, "value": 8})
        self.check("edit", "ok")

        # --- Start: without the Tinker key (default workflow), then the demo workflow.
        if os.environ.get("TINKER_API_KEY"):
            self.note("start_no_tinker_key", "TINKER_API_KEY is set: missing_tinker_key not exercised")
        else:
            start = await self.call("start_no_tinker_key", "rl_start_training")
            self.check("start_no_tinker_key", "missing_tinker_key")
            await self.cleanup_run("start_no_tinker_key", start)
        start = await self.call("start", "rl_start_training", {"workflow": a.workflow})
        self.check("start", "ok")
        run_id = start.get("run_id") if isinstance(start, dict) else None
        if not run_id:
            self.note("start", "no run_id: the run-dependent cases were checked against an unknown id")
            run_id = UNKNOWN_ID
        run_id = str(run_id)

        # --- Status: wait until the run is up, then normal, rate limited, unknown.
        status = await self.wait_run("wait_running", run_id, lambda s: s == "running" or s in TERMINAL, 60)
        if status != "running":
            self.note("wait_running", f"the run never showed as running (last status {status!r})")
        await self.call("status", "rl_check_status", {"run_id": run_id})
        self.check("status", "ok")
        await self.call("status_again", "rl_check_status", {"run_id": run_id})
        self.check("status_again", "rate_limited")
        await self.call("status_unknown", "rl_check_status", {"run_id": UNKNOWN_ID})
        self.check("status_unknown", "unknown_run")
        await self.call("list_runs", "rl_list_runs")
        self.check("list_runs", "ok")

        # --- Stop: unknown, the running run, then again once it has ended.
        await self.call("stop_unknown", "rl_stop_training", {"run_id": UNKNOWN_ID})
        self.check("stop_unknown", "unknown_run")
        before = await self.wait_run("before_stop", run_id, lambda s: True, 5)
        stop = await self.call("stop", "rl_stop_training", {"run_id": run_id})
        if before in TERMINAL:
            self.note("stop", f"the run had already ended ({before}) before it could be stopped; "
                      "the running-stop case was not exercised (use a longer workflow)")
            self.check("stop", "not_running")
        else:
            self.check("stop", "ok")
        ended = await self.wait_run("wait_ended", run_id, lambda s: s in TERMINAL, 120)
        if ended not in TERMINAL:
            self.note("wait_ended", f"the run had not ended within 120 s (last status {ended!r})")
        await self.call("stop_ended", "rl_stop_training", {"run_id": run_id})
        self.check("stop_ended", "not_running")

        # --- Results.
        await self.call("results", "rl_get_results", {"run_id": run_id})
        self.check("results", "ok")
        await self.call("results_unknown", "rl_get_results", {"run_id": UNKNOWN_ID})
        self.check("results_unknown", "unknown_run")
        await self.call("list_runs_end", "rl_list_runs")
        self.check("list_runs_end", "ok")

        # --- Inference test: default provider without its key, then the given provider.
        if os.environ.get("OPENROUTER_API_KEY"):
            self.note("test_no_key", "OPENROUTER_API_KEY is set: missing_provider_key not exercised")
        else:
            args = {"num_steps": 1}
            if a.models:
                args["models"] = a.models
            await self.call("test_no_key", "rl_test_inference", args, timeout=a.test_timeout)
            self.check("test_no_key", "missing_provider_key")
        if a.provider is None:
            self.note("test", "no --provider: the test runs against OpenRouter")
        progress = []
        await self.call("test", "rl_test_inference", self.test_args(), timeout=a.test_timeout, progress=progress)
        self.answers["test"]["progress"] = progress
        self.check("test", "ok")
        if a.cancel_model:
            await self.cancel_test(a.cancel_model)

    async def cancel_test(self, model):
        """A waiting test the client gives up on: cancelling the call must cancel the test (the
        caller checks the test's state; this records what the client saw)."""
        progress = []
        args = {**self.test_args(), "models": [model]}
        first = asyncio.Event()

        async def on_progress(done, total, message):
            progress.append({"progress": done, "total": total, "message": message})
            first.set()

        call = asyncio.ensure_future(self.session.call_tool("rl_test_inference", args, progress_callback=on_progress))
        try:
            await asyncio.wait_for(first.wait(), 60)
        except asyncio.TimeoutError:
            self.note("cancel", "no progress notification within 60 s before cancelling")
        call.cancel()
        try:
            await call
        except (asyncio.CancelledError, Exception):
            pass
        # The progress messages name the test ("test <id>: ..."); wait for the server to cancel it.
        found = re.match(r"test ([0-9a-f-]+):", (progress[0]["message"] or "") if progress else "")
        state = None
        if found:
            end = time.monotonic() + 30
            while time.monotonic() < end:
                results = await self.call("cancel_results", "rl_get_results", {"run_id": found.group(1)})
                state = results.get("status") if isinstance(results, dict) else None
                if state == "cancelled":
                    break
                await asyncio.sleep(0.1)
        self.answers["cancel"] = {"tool": "rl_test_inference", "arguments": args, "progress": progress,
                                  "answer": {"cancelled_by_client": True, "test_status": state}}

    def test_args(self):
        a = self.args
        args = {"num_steps": 1}
        if a.models:
            args["models"] = a.models
        if a.provider:
            args["provider"] = a.provider
        if a.server_type:
            args["server_type"] = a.server_type
        if a.api_key_env:
            args["api_key_env"] = a.api_key_env
        args.update(a.test_extra)
        return args

    async def make_gone_env(self, env_file, gone_dir):
        """Copies the environment into gone_dir under a new name; returns that name once listed."""
        if not env_file or not Path(env_file).is_file():
            return None
        source = Path(env_file)
        new_name = f"{source.stem}_conformance_gone"
        text = source.read_text("utf-8")
        text, _ = re.subn(r"^(\s+name\s*=\s*)([\"']).*?\2", lambda m: f"{m.group(1)}\"{new_name}\"", text,
                          count=1, flags=re.M)
        (Path(gone_dir) / f"{new_name}.py").write_text(text, "utf-8")
        listing = await self.call("list_environments_gone", "rl_list_environments")
        for env in (listing.get("environments") or []) if isinstance(listing, dict) else []:
            if isinstance(env, dict) and str(env.get("file_path", "")).startswith(str(gone_dir)):
                return env.get("name")
        return None

    # -----------------------------------------------------------------------------------------

    def report(self):
        by_tool = {}
        for m in self.mismatches:
            by_tool.setdefault(m["tool"], []).append(m)
        print("conformance of `lachesis mcp` with the reference RL tools", file=sys.stderr)
        for tool in list(self.golden["tools"]):
            found = by_tool.get(tool, [])
            mark = "ok" if not found else f"{len(found)} mismatch(es)"
            print(f"\n{tool}: {self.counts.get(tool, 0)} answer(s) checked, {mark}", file=sys.stderr)
            for m in found:
                got = m["got"]
                got_text = json.dumps(got) if not isinstance(got, str) else got
                if got_text and len(got_text) > 160:
                    got_text = got_text[:157] + "..."
                what = {"missing": "missing", "type": "wrong type", "check": "check failed",
                        "call": "call failed"}[m["kind"]]
                line = f"  [{m['case']} @ {m['step']}] {what}: {m['path']} (expected {m['expected']}"
                line += ")" if m["kind"] == "missing" else f", got {got_text})"
                print(line, file=sys.stderr)
        if self.notes:
            print("\nnotes:", file=sys.stderr)
            for n in self.notes:
                print(f"  [{n['step']}] {n['note']}", file=sys.stderr)
        print(f"\n{len(self.mismatches)} mismatch(es)", file=sys.stderr)


def json_types(prop):
    """The JSON types an argument's input schema allows (type, a type list, or anyOf/oneOf)."""
    types = set()
    t = prop.get("type")
    if isinstance(t, str):
        types.add(t)
    elif isinstance(t, list):
        types.update(t)
    for key in ("anyOf", "oneOf"):
        for sub in prop.get(key) or []:
            types |= json_types(sub)
    return types


async def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("binary", help="the lachesis binary")
    parser.add_argument("env", help="the environment to select (e.g. arith)")
    parser.add_argument("--provider", help="OpenAI-compatible base URL for rl_test_inference (e.g. the stub's /v1)")
    parser.add_argument("--server-type", help="the provider's server type (e.g. openai)")
    parser.add_argument("--api-key-env", help="the environment variable holding the provider's key")
    parser.add_argument("--models", type=lambda s: [m for m in s.split(",") if m],
                        help="comma-separated model ids for rl_test_inference (default: stub with --provider)")
    parser.add_argument("--workflow", default="demo", help="the workflow argument of rl_start_training")
    parser.add_argument("--env-workflow", default=None,
                        help="a workflow that runs the environment, for the no-environment start (default: --workflow)")
    parser.add_argument("--golden", default=str(HERE / "reference_keys.json"))
    parser.add_argument("--test-timeout", type=float, default=900.0, help="seconds to wait for rl_test_inference")
    parser.add_argument("--test-extra", type=json.loads, default={},
                        help="JSON object merged into rl_test_inference's arguments")
    parser.add_argument("--fake-wandb", action="store_true",
                        help="point the server at a fake W&B (fake_wandb.py) that knows every run")
    parser.add_argument("--cancel-model", help="then start a test of this (silent) model and cancel the call")
    parser.add_argument("--server-args", default="mcp", help="the binary's arguments (space-separated)")
    args = parser.parse_args(argv)
    if args.models is None and args.provider:
        args.models = ["stub"]
    if args.env_workflow is None:
        args.env_workflow = args.workflow
    golden = json.loads(Path(args.golden).read_text("utf-8"))

    gone_dir = tempfile.mkdtemp(prefix="lachesis-conformance-envs-")
    env = dict(os.environ)
    env["LACHESIS_ENV_DIRS"] = ":".join(p for p in [env.get("LACHESIS_ENV_DIRS", ""), gone_dir] if p)
    if args.fake_wandb:
        sys.path.insert(0, str(HERE))
        import fake_wandb
        base, _server = fake_wandb.start()
        env.update({"WANDB_API_KEY": "fake-wandb-key-0123456789", "WANDB_BASE_URL": base, "WANDB_ENTITY": "lab"})
    params = StdioServerParameters(command=args.binary, args=args.server_args.split(), env=env)
    runner = None
    try:
        async with stdio_client(params) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                runner = Conformance(session, golden, args)
                try:
                    await runner.scenario(args.env, gone_dir)
                except Exception as e:  # report what was gathered
                    runner.notes.append({"step": "scenario", "note": f"aborted: {type(e).__name__}: {e}"})
                    runner.mismatches.append({"tool": "(scenario)", "case": "-", "step": "scenario", "kind": "call",
                                              "path": "-", "expected": "scenario completes",
                                              "got": f"{type(e).__name__}: {e}"})
    except Exception as e:
        if runner is None:
            print(json.dumps({"ok": False, "mismatches": [{"tool": "(server)", "kind": "call",
                                                          "got": f"{type(e).__name__}: {e}"}], "answers": {}}))
            return 1
        runner.notes.append({"step": "session", "note": f"session ended: {type(e).__name__}: {e}"})
    finally:
        shutil.rmtree(gone_dir, ignore_errors=True)

    runner.report()
    ok = not runner.mismatches
    print(json.dumps({"ok": ok, "mismatches": runner.mismatches, "notes": runner.notes, "answers": runner.answers},
                     default=str))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
