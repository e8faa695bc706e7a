"""Units of data_prep/pretraining/pretraining_instances.py (instances and masking) and
pretraining_records.py (serialization) with exact token lists and a scripted
random number generator: masking, sentence pairs, instances of a document.
"""

import random


from data_prep.pretraining import pretraining_instances as pti
from data_prep.pretraining import pretraining_records as ptr
from tests.helpers.pretraining_data_helpers import parse


class ScriptedRng:
    """A stand-in for random.Random that replays given draws.

    random() and randint() pop the next scripted value (an unexpected draw
    fails the test); shuffle() reverses.
    """

    def __init__(self, randoms=(), randints=()):
        self.randoms = list(randoms)
        self.randints = list(randints)

    def random(self):
        return self.randoms.pop(0)

    def randint(self, a, b):
        value = self.randints.pop(0)
        assert a <= value <= b, (a, value, b)
        return value

    def shuffle(self, items):
        items.reverse()

    def exhausted(self):
        return not self.randoms and not self.randints


def ids(tokenizer, tokens):
    return tokenizer.convert_tokens_to_ids(tokens)


def tokens(tokenizer, token_ids):
    return tokenizer.convert_ids_to_tokens(token_ids)


# ----------------------------------------------------------------------------
# Units with exact token lists.
# ----------------------------------------------------------------------------


def packed(tokenizer, text_a, text_b):
    return ids(
        tokenizer,
        ["[CLS]"] + tokenizer.tokenize(text_a) + ["[SEP]"] + tokenizer.tokenize(text_b) + ["[SEP]"],
    )


def test_masking_all_tokens_become_mask(tokenizer, vocab):
    input_ids = packed(tokenizer, "the cat sat", "unaffable dogs")
    masking = pti.MaskingOptions(
        masked_lm_prob=1.0, max_predictions_per_seq=20, mask_token_prob=1.0, random_token_prob=0.0
    )
    output, positions, labels = pti.create_masked_lm_predictions(
        input_ids, masking, vocab, random.Random(1)
    )
    assert tokens(tokenizer, input_ids) == [
        "[CLS]",
        "the",
        "cat",
        "sat",
        "[SEP]",
        "una",
        "##ffa",
        "##ble",
        "dogs",
        "[SEP]",
    ]
    assert tokens(tokenizer, output) == [
        "[CLS]",
        "[MASK]",
        "[MASK]",
        "[MASK]",
        "[SEP]",
        "[MASK]",
        "[MASK]",
        "[MASK]",
        "[MASK]",
        "[SEP]",
    ]
    assert positions == [1, 2, 3, 5, 6, 7, 8]
    assert tokens(tokenizer, labels) == ["the", "cat", "sat", "una", "##ffa", "##ble", "dogs"]


def test_masking_keep_and_random_shares(tokenizer, vocab):
    input_ids = packed(tokenizer, "the cat sat", "on the mat")
    keep_all = pti.MaskingOptions(masked_lm_prob=1.0, mask_token_prob=0.0, random_token_prob=0.0)
    output, positions, labels = pti.create_masked_lm_predictions(
        input_ids, keep_all, vocab, random.Random(3)
    )
    assert output == input_ids
    assert positions == [1, 2, 3, 5, 6, 7]
    assert tokens(tokenizer, labels) == ["the", "cat", "sat", "on", "the", "mat"]

    # Random words drawn from a one-word vocabulary: always "zebra".
    zebra = tokenizer.vocab["zebra"]
    one_word = pti.VocabIds(
        vocab.cls_id, vocab.sep_id, vocab.mask_id, (zebra,), vocab.is_continuation
    )
    all_random = pti.MaskingOptions(masked_lm_prob=0.4, mask_token_prob=0.0, random_token_prob=1.0)
    output, positions, labels = pti.create_masked_lm_predictions(
        input_ids, all_random, one_word, random.Random(3)
    )
    assert len(positions) == 4  # round(10 * 0.4)
    assert [t for t in tokens(tokenizer, output)].count("zebra") == 4
    assert all(output[p] == zebra for p in positions)


def test_masking_draws_like_the_original(tokenizer, vocab):
    """Scripted draws: shuffle reverses, then [MASK] / keep / random per token."""
    input_ids = packed(tokenizer, "the cat sat", "on the mat")
    masking = pti.MaskingOptions(masked_lm_prob=0.3)  # round(10 * 0.3) = 3
    rng = ScriptedRng(randoms=[0.1, 0.9, 0.3, 0.95, 0.7], randints=[2003])
    output, positions, labels = pti.create_masked_lm_predictions(input_ids, masking, vocab, rng)
    # Reversed candidates: mat(7), the(6), on(5). mat -> [MASK] (0.1 < 0.8);
    # the -> kept (0.9, then 0.3 < 0.5); on -> random word 2003 (0.95, 0.7).
    assert tokens(tokenizer, output) == [
        "[CLS]",
        "the",
        "cat",
        "sat",
        "[SEP]",
        "is",
        "the",
        "[MASK]",
        "[SEP]",
    ]
    assert positions == [5, 6, 7]
    assert tokens(tokenizer, labels) == ["on", "the", "mat"]
    assert rng.exhausted()


def test_whole_word_groups_and_budget(tokenizer, vocab):
    input_ids = packed(tokenizer, "unaffable", "cat")  # una ##ffa ##ble | cat
    groups = pti.masking_candidates(input_ids, vocab, do_whole_word_mask=True)
    assert groups == [[1, 2, 3], [5]]
    assert pti.masking_candidates(input_ids, vocab, False) == [[1], [2], [3], [5]]
    # Budget 1 (round(7 * 0.15)): reversed order tries "cat" first and takes it.
    masking = pti.MaskingOptions(
        do_whole_word_mask=True, mask_token_prob=1.0, random_token_prob=0.0
    )
    rng = ScriptedRng(randoms=[0.0])
    output, positions, _ = pti.create_masked_lm_predictions(input_ids, masking, vocab, rng)
    assert tokens(tokenizer, output) == [
        "[CLS]",
        "una",
        "##ffa",
        "##ble",
        "[SEP]",
        "[MASK]",
        "[SEP]",
    ]
    assert positions == [5]
    # Budget 3, "cat" first, then the 3-piece word would exceed it: skipped.
    masking = pti.MaskingOptions(masked_lm_prob=0.4, do_whole_word_mask=True)
    rng = ScriptedRng(randoms=[0.0])
    _, positions, _ = pti.create_masked_lm_predictions(input_ids, masking, vocab, rng)
    assert positions == [5] and rng.exhausted()
    # The word comes first in reversed order: all its pieces, within budget.
    input_ids = packed(tokenizer, "cat", "unaffable")  # cat | una ##ffa ##ble
    rng = ScriptedRng(randoms=[0.0, 0.0, 0.0])
    output, positions, labels = pti.create_masked_lm_predictions(input_ids, masking, vocab, rng)
    assert positions == [3, 4, 5]
    assert tokens(tokenizer, output) == [
        "[CLS]",
        "cat",
        "[SEP]",
        "[MASK]",
        "[MASK]",
        "[MASK]",
        "[SEP]",
    ]
    assert tokens(tokenizer, labels) == ["una", "##ffa", "##ble"]


def test_truncate_seq_pair_front_and_back():
    tokens_a = [1, 2, 3, 4, 5]
    tokens_b = [6, 7]
    # a is longer: front (0.2), back (0.7), front (0.1) -> [3, 4] + [6, 7]...
    rng = ScriptedRng(randoms=[0.2, 0.7, 0.1])
    pti.truncate_seq_pair(tokens_a, tokens_b, 4, rng)
    assert (tokens_a, tokens_b) == ([3, 4], [6, 7])
    # ...then a tie: b is cut (back).
    rng = ScriptedRng(randoms=[0.9])
    pti.truncate_seq_pair(tokens_a, tokens_b, 3, rng)
    assert (tokens_a, tokens_b) == ([3, 4], [6])
    assert rng.exhausted()


def test_sentence_pairs_split_random_next_and_put_back():
    documents = [[[1, 1], [2, 2], [3, 3], [4, 4]], [[9], [8], [7]]]
    # Target 5: sentences 1-3 (6 tokens) form a chunk; A = the first 2
    # (randint 2); random next (0.3 < 0.5): document 1 (randint 1), from its
    # sentence 1 (randint 1) until 5 - 4 = 1 token; sentence 3 goes back.
    # Next chunk: sentences 3-4 (end of document): A = sentence 3 (randint 1),
    # actual next (0.6): B = sentence 4.
    rng = ScriptedRng(randoms=[0.3, 0.6], randints=[2, 1, 1, 1])
    pairs = list(pti.sentence_pairs(documents, 0, 5, rng))
    assert pairs == [([1, 1, 2, 2], [8], True), ([3, 3], [4, 4], False)]
    assert rng.exhausted()


def test_sentence_pairs_single_sentence_is_always_random_next():
    documents = [[[1, 2, 3]], [[5], [6]]]
    # One sentence: no A/B draw, no coin; the random document draw hits itself
    # (randint 0) then 1; start at its sentence 0; B fills to 10 - 3 tokens.
    rng = ScriptedRng(randints=[0, 1, 0])
    pairs = list(pti.sentence_pairs(documents, 0, 10, rng))
    assert pairs == [([1, 2, 3], [5, 6], True)]
    assert rng.exhausted()


def test_instances_from_document_exact(tokenizer, vocab):
    documents = [
        [ids(tokenizer, ["the", "cat"]), ids(tokenizer, ["sat", "down"])],
        [ids(tokenizer, ["dogs"])],
    ]
    instance_options = pti.InstanceOptions(max_seq_length=8)
    masking = pti.MaskingOptions(masked_lm_prob=0.1, mask_token_prob=1.0, random_token_prob=0.0)
    # Target: short (0.05 < 0.1) -> randint 3. Chunk [the cat][sat down]:
    # A = 1 sentence (randint 1), actual next (0.9). No truncation (4 <= 5).
    # Masking: budget 1 of reversed candidates -> "down" -> [MASK] (0.0).
    rng = ScriptedRng(randoms=[0.05, 0.9, 0.0], randints=[3, 1])
    [instance] = pti.create_instances_from_document(
        documents, 0, instance_options, masking, vocab, rng
    )
    assert tokens(tokenizer, instance.input_ids) == [
        "[CLS]",
        "the",
        "cat",
        "[SEP]",
        "sat",
        "[MASK]",
        "[SEP]",
    ]
    assert instance.segment_ids == [0, 0, 0, 0, 1, 1, 1]
    assert instance.masked_lm_positions == [5]
    assert tokens(tokenizer, instance.masked_lm_ids) == ["down"]
    assert instance.is_random_next is False
    assert rng.exhausted()


def test_single_segment_instances_exact(tokenizer, vocab):
    documents = [
        [
            ids(tokenizer, ["the", "cat"]),
            ids(tokenizer, ["sat", "down"]),
            ids(tokenizer, ["on", "the", "mat"]),
        ]
    ]
    instance_options = pti.InstanceOptions(max_seq_length=6, next_sentence_prediction=False)
    masking = pti.MaskingOptions(masked_lm_prob=0.1, mask_token_prob=1.0, random_token_prob=0.0)
    # Target 4 (0.5 >= 0.1): [the cat sat down] fits; [on the mat] is the rest.
    rng = ScriptedRng(randoms=[0.5, 0.0, 0.0])
    instances = pti.create_instances_from_document(
        documents, 0, instance_options, masking, vocab, rng
    )
    assert [tokens(tokenizer, i.input_ids) for i in instances] == [
        ["[CLS]", "the", "cat", "sat", "[MASK]", "[SEP]"],
        ["[CLS]", "on", "the", "[MASK]", "[SEP]"],
    ]
    assert [i.segment_ids for i in instances] == [[0] * 6, [0] * 5]
    assert [i.is_random_next for i in instances] == [False, False]
    assert rng.exhausted()


def test_serialization_round_trip(tokenizer, vocab):
    instance = pti.TrainingInstance(
        input_ids=ids(tokenizer, ["[CLS]", "the", "[MASK]", "[SEP]", "sat", "[SEP]"]),
        segment_ids=[0, 0, 0, 0, 1, 1],
        masked_lm_positions=[2],
        masked_lm_ids=ids(tokenizer, ["cat"]),
        is_random_next=True,
    )
    record = ptr.serialize_instance(instance, max_seq_length=8, max_predictions_per_seq=3)
    f = parse(record, 8, 3)
    assert tokens(tokenizer, f["input_ids"][:6]) == [
        "[CLS]",
        "the",
        "[MASK]",
        "[SEP]",
        "sat",
        "[SEP]",
    ]
    assert f["input_ids"][6:] == [0, 0]
    assert f["input_mask"] == [1] * 6 + [0, 0]
    assert f["segment_ids"] == [0, 0, 0, 0, 1, 1, 0, 0]
    assert f["masked_lm_positions"] == [2, 0, 0]
    assert f["masked_lm_ids"] == [tokenizer.vocab["cat"], 0, 0]
    assert f["masked_lm_weights"] == [1.0, 0.0, 0.0]
    assert f["next_sentence_labels"] == [1]
    assert ptr.canonical_record(record) == record


def test_shuffle_matches_random_shuffle():
    assert pti._INLINED_SHUFFLE_IS_EXACT
    for seed in (0, 12345):
        for size in (0, 1, 2, 5, 128, 4097):
            expected, rng_a = list(range(size)), random.Random(seed)
            actual, rng_b = list(range(size)), random.Random(seed)
            rng_a.shuffle(expected)
            pti.shuffle(actual, rng_b)
            assert actual == expected
            assert rng_a.random() == rng_b.random()


def test_keep_share_is_exact():
    assert pti.MaskingOptions().keep_share == 0.5
    assert pti.MaskingOptions(mask_token_prob=0.5, random_token_prob=0.2).keep_share == 0.6
    assert pti.MaskingOptions(mask_token_prob=1.0, random_token_prob=0.0).keep_share == 0.0
