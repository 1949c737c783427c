"""A tiny real Atropos environment for lachesis tests: integer arithmetic, scored by exact answer.

Questions are generated in code (no datasets, no hub). A completion scores 1.0 when the last integer
it contains equals the answer, else 0.0, so the mean score of a group is its accuracy.

    python arith_env.py process --env.total_steps 2 --env.group_size 4 \
        --env.data_path_to_save_groups out.jsonl --env.use_wandb false
    python arith_env.py serve --config run.yaml        # needs run-api and a trainer
"""

import os
import random
import re
import sys
from pathlib import Path

from atroposlib.envs.base import APIServerConfig, BaseEnv, BaseEnvConfig, ScoredDataGroup

# venv.sh builds the tokenizer inside the venv, and this file runs with the venv's python.
TOKENIZER_DIR = os.environ.get("LACHESIS_TOKENIZER_DIR") or str(Path(sys.prefix) / "lachesis-tokenizer")
STUB_URL = os.environ.get("LACHESIS_STUB_URL", "http://127.0.0.1:9004/v1")
SYSTEM_PROMPT = "Answer the arithmetic question. End your reply with the integer answer."
MAX_TOKENS = 32
INTEGER = re.compile(r"-?\d+")


def make_question(index: int) -> dict:
    rng = random.Random(index)  # item i is the same in every run
    a, b, op = rng.randint(1, 99), rng.randint(1, 99), rng.choice("+-*")
    answer = {"+": a + b, "-": a - b, "*": a * b}[op]
    return {"question": f"What is {a} {op} {b}?", "answer": answer}


def score_text(text: str, answer: int) -> float:
    found = INTEGER.findall(text or "")
    return 1.0 if found and int(found[-1]) == answer else 0.0


class ArithEnv(BaseEnv):
    """Integer arithmetic questions; reward 1.0 for the right final integer, else 0.0."""

    name = "arith"

    @classmethod
    def config_init(cls):
        env_config = BaseEnvConfig(
            tokenizer_name=TOKENIZER_DIR,
            group_size=4,
            use_wandb=False,
            rollout_server_url="http://127.0.0.1:8000",
            total_steps=2,
            batch_size=8,
            steps_per_eval=0,  # no mid-training evals unless asked for
            max_token_length=256,
            max_num_workers=4,
            wandb_name=cls.name,
        )
        # A list, even of one: a bare APIServerConfig would make ServerManager ignore base_url.
        server_configs = [
            APIServerConfig(
                model_name="stub",
                # sglang/vllm server objects load their own tokenizer from this (or from
                # model_name when it is "none"): it must be loadable offline too.
                tokenizer_name=TOKENIZER_DIR,
                base_url=STUB_URL,
                api_key="x",
                server_type="sglang",  # what the Tinker trainer serves; token ids via /generate
                num_requests_for_eval=4,
            )
        ]
        return env_config, server_configs

    async def setup(self):
        self.next_index = 0

    async def get_next_item(self):
        item = make_question(self.next_index)
        self.next_index += 1
        return item

    def _token_level(self) -> bool:
        # sglang/vllm give token ids and logprobs (what a trainer needs); an OpenAI endpoint
        # (hosted models in inference tests) only gives text, so tokens are rebuilt locally.
        config = getattr(self.server.servers[0], "config", None)
        return getattr(config, "server_type", "openai") in ("sglang", "vllm")

    async def collect_trajectories(self, item):
        messages = [
            {"role": "system", "content": SYSTEM_PROMPT},
            {"role": "user", "content": item["question"]},
        ]
        n = self.config.group_size
        group = ScoredDataGroup(tokens=[], masks=[], scores=[], messages=[])
        if self._token_level():
            async with self.server.managed_server(tokenizer=self.tokenizer) as managed:
                completion = await managed.chat_completion(
                    messages=messages, n=n, max_tokens=MAX_TOKENS, temperature=1.0
                )
                nodes = managed.get_state()["nodes"]
            group["inference_logprobs"] = [node.logprobs for node in nodes]
            group["tokens"] = [node.tokens for node in nodes]
            group["masks"] = [node.masked_tokens for node in nodes]
        else:
            completion = await self.server.chat_completion(
                messages=messages, n=n, max_tokens=MAX_TOKENS, temperature=1.0
            )
            # Not atroposlib's tokenize_for_trainer: with transformers 5 its
            # apply_chat_template() returns a BatchEncoding and the result is garbage.
            prompt = self.tokenizer.apply_chat_template(
                messages, tokenize=False, add_generation_prompt=True
            )
            prompt_ids = self.tokenizer.encode(prompt, add_special_tokens=False)
            for choice in completion.choices:
                out = self.tokenizer.encode(choice.message.content or "", add_special_tokens=False)
                out.append(self.tokenizer.eos_token_id)
                group["tokens"].append(prompt_ids + out)
                group["masks"].append([-100] * len(prompt_ids) + out)
        texts = [choice.message.content or "" for choice in completion.choices]
        group["scores"] = self.score(texts, item["answer"])
        group["messages"] = [messages + [{"role": "assistant", "content": t}] for t in texts]
        return group, []

    def score(self, texts, answer):
        return [score_text(t, answer) for t in texts]

    async def evaluate(self, *args, **kwargs):
        # A few fixed questions, one answer each; metrics land in data_dir_to_save_evals if set.
        items = [make_question(-(i + 1)) for i in range(4)]
        samples = []
        for item in items:
            completion = await self.server.chat_completion(
                messages=[
                    {"role": "system", "content": SYSTEM_PROMPT},
                    {"role": "user", "content": item["question"]},
                ],
                n=1,
                max_tokens=MAX_TOKENS,
                split="eval",
            )
            text = completion.choices[0].message.content or ""
            samples.append({"question": item["question"], "gold_answer": str(item["answer"]),
                            "response": text, "score": score_text(text, item["answer"])})
        accuracy = sum(s["score"] for s in samples) / len(samples)
        await self.evaluate_log(metrics={"eval/percent_correct": accuracy}, samples=samples)


if __name__ == "__main__":
    ArithEnv.cli()
