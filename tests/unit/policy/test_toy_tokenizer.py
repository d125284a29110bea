from policy.toy.tokenizer import BOS, EOS, PAD, VOCAB_SIZE, decode, encode


def test_roundtrip_unicode():
    text = "def f(a):\n    return a  # café ✓"
    assert decode(encode(text)) == text
    assert max(encode(text)) < 256


def test_specials_dropped_and_bad_bytes_replaced():
    assert decode([BOS, *encode("hi"), EOS, PAD]) == "hi"
    assert decode([0xFF, ord("a")]) == "\ufffda"
    assert len({BOS, EOS, PAD}) == 3 and max(BOS, EOS, PAD) < VOCAB_SIZE
