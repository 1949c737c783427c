"""The arith environment sampling through atroposlib's ManagedServer, as token-level environments do.

Against an OpenAI-type server (the inference-test providers) atroposlib refuses a ManagedServer
unless ATROPOS_ALLOW_DUMMY_MANAGED_SERVER=1 is set; lachesis sets it for inference tests on such
providers. Kept apart from envs/ so tests that count the environments there are unaffected.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "envs"))

from arith_env import MAX_TOKENS, SYSTEM_PROMPT, ArithEnv  # noqa: E402
from atroposlib.envs.base import BaseEnv, ScoredDataGroup  # noqa: E402


class ArithManagedEnv(ArithEnv, BaseEnv):
    """Integer arithmetic, sampled through a ManagedServer whatever the server type."""

    name = "arith_managed"

    async def collect_trajectories(self, item):
        if self._token_level():
            return await super().collect_trajectories(item)
        messages = [
            {"role": "system", "content": SYSTEM_PROMPT},
            {"role": "user", "content": item["question"]},
        ]
        # Raises NotImplementedError on an OpenAI server without ATROPOS_ALLOW_DUMMY_MANAGED_SERVER.
        async with self.server.managed_server(tokenizer=self.tokenizer) as managed:
            completion = await managed.chat_completion(
                messages=messages, n=self.config.group_size, max_tokens=MAX_TOKENS, temperature=1.0
            )
        prompt = self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        prompt_ids = self.tokenizer.encode(prompt, add_special_tokens=False)
        group = ScoredDataGroup(tokens=[], masks=[], scores=[], messages=[])
        texts = [choice.message.content or "" for choice in completion.choices]
        for text in texts:
            out = self.tokenizer.encode(text, add_special_tokens=False) + [self.tokenizer.eos_token_id]
            group["tokens"].append(prompt_ids + out)
            group["masks"].append([-100] * len(prompt_ids) + out)
        group["scores"] = self.score(texts, item["answer"])
        group["messages"] = [messages + [{"role": "assistant", "content": t}] for t in texts]
        return group, []


if __name__ == "__main__":
    ArithManagedEnv.cli()
