"""Arithmetic questions with their data in code, for lachesis' inference tests.

The stand-in model server (tests/python/stub_inference.py) answers "What is A op B?" right (its
first choice is always right) and anything else with "ok". So with `unanswerable=U` of the
`count` questions it cannot answer, every model the stub serves scores a mean reward of exactly
(count - U) / count.
"""

import re

import verifiers as vf
from datasets import Dataset

OPS = ["+", "-", "*"]


def _rows(count: int, unanswerable: int) -> list[dict]:
    rows = []
    for i in range(count):
        a, b, op = 3 + 7 * i, 11 - 2 * i, OPS[i % 3]
        value = {"+": a + b, "-": a - b, "*": a * b}[op]
        if i < count - unanswerable:
            rows.append({"question": f"What is {a} {op} {b}?", "answer": str(value)})
        else:
            rows.append({"question": f"Name the colour of question {i}.", "answer": str(value)})
    return rows


def load_environment(count: int = 4, unanswerable: int = 1, **kwargs) -> vf.Environment:
    if not 0 <= unanswerable <= count:
        raise ValueError(f"unanswerable must be between 0 and count ({count}), got {unanswerable}")
    dataset = Dataset.from_list(_rows(count, unanswerable))

    def correct(completion, answer, **_) -> float:
        text = completion[-1]["content"] if isinstance(completion, list) else str(completion)
        found = re.findall(r"-?\d+", text or "")
        return 1.0 if found and found[-1] == answer else 0.0

    rubric = vf.Rubric(funcs=[correct], weights=[1.0])
    return vf.SingleTurnEnv(
        dataset=dataset,
        eval_dataset=dataset,
        system_prompt="Answer the arithmetic question. End your reply with the integer answer.",
        rubric=rubric,
        **kwargs,
    )
