# Config introspection helper for lachesis (src/runtime/environments/introspect/mod.rs runs it with
# `python -B -c <this file> MIN_VERSION ENV_FILE CLASS_NAME`).
#
# It imports one environment file, calls the class's config_init() and describes every field of
# the resulting pydantic config class. The answer is one JSON object on stdout with an "outcome"
# key; everything the environment or atroposlib prints goes to stderr.
#
# Keep this file parseable by old interpreters (no f-strings, annotations, walrus, keyword-only
# arguments or print(file=...)): the version check must get to run and name the version, instead
# of the interpreter stopping at a SyntaxError that says nothing useful.

import json
import os
import sys
import traceback

# Exit codes mirror the outcome, for a reader who only sees the status.
EXIT_CODES = {
    "ok": 0,
    "python_too_old": 10,
    "atropos_missing": 11,
    "atropos_broken": 12,
    "env_import": 13,
    "class_not_found": 14,
    "failed": 15,
}

MAX_DEPTH = 20


def main(argv):
    # The environment may print at import time, from Python or from C extensions. Keep a private
    # copy of the real stdout for the answer and point fd 1 at stderr. os.dup gives a
    # non-inheritable descriptor, so processes the environment starts cannot hold the pipe open.
    answer_fd = os.dup(1)
    os.dup2(2, 1)
    try:
        answer = run(argv)
    except BaseException:  # the helper must always answer, whatever the environment raised
        traceback.print_exc()
        answer = {"outcome": "failed", "detail": last_line(sys.exc_info())}
    answer.setdefault("python", version_string())
    sys.stdout.flush()
    payload = json.dumps(answer, ensure_ascii=True, allow_nan=False)
    os.write(answer_fd, (payload + "\n").encode("ascii"))
    return EXIT_CODES.get(answer["outcome"], EXIT_CODES["failed"])


def version_string():
    return "%d.%d.%d" % tuple(sys.version_info[:3])


def last_line(exc_info):
    """The exception as one line, like the last line of its traceback."""
    exc_type, exc = exc_info[0], exc_info[1]
    if isinstance(exc, SyntaxError):
        # Its traceback's last line drops the file and line number; str() keeps them.
        text = "%s: %s" % (exc_type.__name__, exc)
    else:
        lines = traceback.format_exception_only(exc_type, exc)
        text = lines[-1] if lines else "unknown error"
    return " ".join(part.strip() for part in text.splitlines() if part.strip())


def run(argv):
    if len(argv) != 3:
        return {"outcome": "failed", "detail": "usage: MIN_VERSION ENV_FILE CLASS_NAME"}
    minimum = tuple(int(part) for part in argv[0].split("."))
    env_file, class_name = argv[1], argv[2]
    if tuple(sys.version_info[:len(minimum)]) < minimum:
        return {"outcome": "python_too_old"}

    # `-c` puts the working directory first on sys.path; a stray file there must not shadow
    # atroposlib or its dependencies.
    if sys.path and sys.path[0] in ("", os.getcwd()):
        sys.path.pop(0)

    base_config = import_base_env_config()
    if isinstance(base_config, dict):
        return base_config

    module = import_env_file(env_file)
    if isinstance(module, dict):
        return module

    env_class = module.__dict__.get(class_name)
    if not isinstance(env_class, type):
        defined = sorted(
            name
            for name, obj in module.__dict__.items()
            if isinstance(obj, type) and obj.__module__ == module.__name__
        )
        return {"outcome": "class_not_found", "defined": defined}

    return describe(env_class, base_config)


def import_base_env_config():
    try:
        from atroposlib.envs.base import BaseEnvConfig
    except ImportError as exc:
        traceback.print_exc()
        if getattr(exc, "name", None) == "atroposlib":
            return {"outcome": "atropos_missing"}
        return {"outcome": "atropos_broken", "detail": last_line(sys.exc_info())}
    except BaseException:
        traceback.print_exc()
        return {"outcome": "atropos_broken", "detail": last_line(sys.exc_info())}
    return BaseEnvConfig


def import_env_file(env_file):
    import importlib.util
    import re

    path = os.path.abspath(env_file)
    # Environments import their siblings (shared base classes, utilities) by plain module name,
    # as they would when run as `python env.py serve`.
    sys.path.insert(0, os.path.dirname(path))
    stem = os.path.splitext(os.path.basename(path))[0]
    # Not "__main__", so the file's `if __name__ == "__main__":` block does not run; and a
    # private name, so the module cannot shadow a real module the environment itself imports.
    module_name = "_lachesis_env_" + re.sub(r"\W", "_", stem)
    try:
        spec = importlib.util.spec_from_file_location(module_name, path)
        if spec is None or spec.loader is None:
            return {"outcome": "env_import", "detail": "not a loadable Python file"}
        module = importlib.util.module_from_spec(spec)
        sys.modules[module_name] = module
        spec.loader.exec_module(module)
    except BaseException:  # SystemExit from a module-level sys.exit() is an import failure too
        traceback.print_exc()
        return {"outcome": "env_import", "detail": last_line(sys.exc_info())}
    return module


def describe(env_class, base_config):
    instance = None
    fell_back = None
    try:
        result = env_class.config_init()
        if not isinstance(result, tuple) or len(result) != 2:
            raise TypeError("config_init() did not return (env_config, server_configs)")
        instance = result[0]
        config_class = type(instance)
        if not is_model_class(config_class):
            raise TypeError(
                "config_init() returned a %s, not a pydantic model" % config_class.__name__
            )
    except BaseException:
        traceback.print_exc()
        instance = None
        config_class = fallback_class(env_class, base_config)
        fell_back = "config_init() failed (%s); showing the defaults of %s" % (
            last_line(sys.exc_info()),
            config_class.__name__,
        )

    fields = [
        describe_field(name, info, instance)
        for name, info in config_class.model_fields.items()
    ]
    return {
        "outcome": "ok",
        "config_class": config_class.__name__,
        "fell_back": fell_back,
        "fields": fields,
    }


def is_model_class(cls):
    return isinstance(getattr(cls, "model_fields", None), dict)


def fallback_class(env_class, base_config):
    # The class named by env_config_cls is what config_init would normally build, so its fields
    # are closer to the truth than BaseEnvConfig's.
    declared = getattr(env_class, "env_config_cls", None)
    if isinstance(declared, type) and is_model_class(declared):
        return declared
    return base_config


def describe_field(name, info, instance):
    required = info.is_required()
    default = None
    if not required:
        try:
            default = info.get_default(call_default_factory=True)
        except Exception:  # a factory that needs validated data, or one that fails
            default = None
    value = getattr(instance, name, default) if instance is not None else default
    annotation = info.annotation
    return {
        "name": name,
        "type_name": type_name(annotation),
        "kind": kind_of(annotation),
        "optional": allows_none(annotation),
        "required": required,
        "default": to_json(default, 0),
        "value": to_json(value, 0),
        "description": info.description,
    }


# ---- annotations ------------------------------------------------------------------------------

def typing_parts(tp):
    import typing

    return typing.get_origin(tp), typing.get_args(tp)


def is_union(origin):
    import types
    import typing

    return origin is typing.Union or origin is getattr(types, "UnionType", None)


def is_literal(origin):
    import typing

    return origin is typing.Literal


def is_annotated(origin):
    import typing

    return origin is typing.Annotated


NONE_TYPE = type(None)


def type_name(tp):
    if tp is None or tp is NONE_TYPE:
        return "None"
    origin, args = typing_parts(tp)
    if is_annotated(origin):
        return type_name(args[0])
    if is_union(origin):
        members = [a for a in args if a is not NONE_TYPE]
        if len(members) == 1 and len(members) < len(args):
            return "Optional[%s]" % type_name(members[0])
        return "Union[%s]" % ", ".join(type_name(a) for a in args)
    if is_literal(origin):
        return "Literal[%s]" % ", ".join(repr(a) for a in args)
    if origin is not None:
        base = getattr(tp, "_name", None) or getattr(origin, "__name__", None) or str(origin)
        if not args:
            return base
        return "%s[%s]" % (base, ", ".join(type_arg_name(a) for a in args))
    if isinstance(tp, type):
        return tp.__name__
    return str(tp).replace("typing.", "")


def type_arg_name(arg):
    if isinstance(arg, (list, tuple)):  # Callable[[int, str], bool]
        return "[%s]" % ", ".join(type_arg_name(a) for a in arg)
    if arg is Ellipsis:
        return "..."
    return type_name(arg)


def allows_none(tp):
    import typing

    if tp is None or tp is NONE_TYPE or tp is typing.Any:
        return True
    origin, args = typing_parts(tp)
    if is_annotated(origin):
        return allows_none(args[0])
    if is_union(origin):
        return any(allows_none(a) for a in args)
    if is_literal(origin):
        return None in args
    return False


def kind_of(tp):
    import collections.abc
    import enum

    origin, args = typing_parts(tp)
    if is_annotated(origin):
        return kind_of(args[0])
    if is_union(origin):
        members = [a for a in args if a is not NONE_TYPE]
        return kind_of(members[0]) if len(members) == 1 else "other"
    if is_literal(origin):
        return kind_of_values([a for a in args if a is not None])
    container = origin if origin is not None else tp
    if not isinstance(container, type):
        return "other"
    if issubclass(container, enum.Enum):
        return kind_of_values([member.value for member in container])
    if issubclass(container, bool):
        return "bool"
    if issubclass(container, int):
        return "int"
    if issubclass(container, float):
        return "float"
    if issubclass(container, str):
        return "str"
    if issubclass(container, collections.abc.Mapping):
        return "dict"
    if issubclass(container, (list, tuple, set, frozenset, collections.abc.Sequence)):
        return "list"
    return "other"


def kind_of_values(values):
    # A Literal or Enum is entered as its values: the kind of those values, when they agree.
    kinds = set(kind_of(type(v)) for v in values)
    return kinds.pop() if len(kinds) == 1 else "other"


# ---- values -----------------------------------------------------------------------------------

def to_json(value, depth):
    import enum
    import math
    import pathlib

    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return value if math.isfinite(value) else repr(value)
    if depth >= MAX_DEPTH:
        return repr(value)
    # An enum is entered and compared by its value, which is what a config file holds.
    if isinstance(value, enum.Enum):
        return to_json(value.value, depth + 1)
    if isinstance(value, pathlib.PurePath):
        return str(value)
    if isinstance(value, (list, tuple)):
        return [to_json(v, depth + 1) for v in value]
    if isinstance(value, (set, frozenset)):
        return sorted((to_json(v, depth + 1) for v in value), key=repr)
    if isinstance(value, dict):
        return dict((json_key(k), to_json(v, depth + 1)) for k, v in value.items())
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        try:
            return to_json(dump(mode="json"), depth + 1)
        except Exception:
            pass
    return repr(value)


def json_key(key):
    return key if isinstance(key, str) else str(key)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
