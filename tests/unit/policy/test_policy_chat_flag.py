"""An HF checkpoint remembers whether its policy feeds prompts through the chat template, so the
replicas, gate and trainer that load it from a directory encode prompts the same way."""

from policy.hf import HFPolicy
from policy.loader import load_policy


def test_chat_template_setting_travels_with_the_checkpoint(tiny_hf, tmp_path):
    policy = tiny_hf("llama", experts=0)
    chat = HFPolicy(policy.module, policy.tokenizer, chat_template=True)
    plain = HFPolicy(policy.module, policy.tokenizer, chat_template=False)
    chat.save(tmp_path / "chat", metadata={"origin": "test"})
    plain.save(tmp_path / "plain")
    assert load_policy(tmp_path / "chat").chat_template is True
    assert load_policy(tmp_path / "plain").chat_template is False
