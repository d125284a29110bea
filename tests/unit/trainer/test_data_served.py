"""Rows that carry the prompt as served (schema v2): its token ids are used as they are, its
logged prompt-position routing is replayed, and the pad mask does not depend on the pad id."""

import pyarrow as pa
import pytest

from trainer.data import collate, rows_to_samples


def _rows(prompt_ids, prompt_routes, **over):
    cols = {"prompt": ["p"], "prompt_token_ids": [prompt_ids],
            "prompt_routed_experts": [prompt_routes], "response_token_ids": [[5, 2]],
            "response_logprobs": [[-0.5, -0.25]], "routed_experts": [[[[0, 1]], [[2, 3]]]],
            "reward": [1.0], "task_kind": ["arith"], "model_version": [1], "temperature": [1.0]}
    cols.update(over)
    return pa.table(cols)


def test_served_prompt_ids_and_routes_are_used():
    rows = _rows([1, 2, 7], [[[3, 0]], [[1, 2]], [[0, 1]]])
    (s,), truncated = rows_to_samples(rows, vocab_size=16, max_seq_len=64,
                                      encode_prompt=lambda p: pytest.fail("re-tokenised"))
    assert s.prompt_ids == [1, 2, 7] and not truncated
    b = collate([s], n_layers=1, top_k=2, pad_id=2)  # pads with an id the prompt also uses
    assert b.tokens[0].tolist() == [1, 2, 7, 5]
    assert b.pad_mask[0].tolist() == [True] * 4
    assert b.replay[0, :, 0].tolist() == [[3, 0], [1, 2], [0, 1], [2, 3]]
    assert b.resp_mask[0].tolist() == [False, False, True, True]


def test_v1_rows_are_tokenised_by_the_policy_and_replay_only_the_response():
    rows = _rows(None, None)
    (s,), _ = rows_to_samples(rows, vocab_size=16, max_seq_len=64, encode_prompt=lambda p: [9, 4])
    assert s.prompt_ids == [9, 4] and s.prompt_routes == []
    b = collate([s], n_layers=1, top_k=2)
    assert b.replay[0, 0, 0].tolist() == [-1, -1]


def test_truncated_prompt_drops_its_routes_and_bad_ids_are_named():
    (s,), truncated = rows_to_samples(_rows(list(range(1, 9)), [[[0, 1]]] * 8), vocab_size=16,
                                      max_seq_len=6)
    assert truncated and s.prompt_routes == []
    with pytest.raises(ValueError, match="prompt_token_ids has id 99"):
        rows_to_samples(_rows([1, 99], []), vocab_size=16, max_seq_len=64)


def test_rows_left_out_of_training_are_marked_and_null_reads_as_trainable():
    rows = pa.concat_tables([_rows(None, None, trainable=[v]) for v in (True, False, None)],
                            promote_options="default")
    samples, _ = rows_to_samples(rows, vocab_size=16, max_seq_len=64, encode_prompt=lambda p: [9])
    assert [s.trainable for s in samples] == [True, False, True]
