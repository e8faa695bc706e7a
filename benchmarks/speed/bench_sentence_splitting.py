"""Sentence splitters on real text with known sentence boundaries: errors and speed.

Two kinds of paragraphs whose sentences are known:
  paper  the bundled BERT paper text (sample_data/corpus), one sentence per line: each
         document's lines joined with spaces into one paragraph;
  mrpc   MRPC training sentences (news, one sentence per string), distinct ones joined
         five at a time into paragraphs.
A splitter's output boundaries are compared with the true ones, as character offsets
in the paragraph (whitespace ignored):
  missed    a true boundary not found, counted only after a sentence that ends in
            . ! ? (or one of them followed by a quote or bracket): no splitter can find
            the end of a heading or a formula line;
  spurious  a boundary found inside a true sentence.
Speed: characters per second of one pass over both sets, best of `--repeats`
(splitters that memoize decisions gain on repeats: give --repeats=1 and one splitter
per process for first-pass figures).

    python -m benchmarks.speed.bench_sentence_splitting \
        --splitters=sentencex,pysbd,blingfire,nupunkt
"""

from __future__ import annotations

import argparse
import csv
import pathlib
import re
import time

REPO = pathlib.Path(__file__).resolve().parent.parent.parent
CORPUS = sorted((REPO / "sample_data" / "corpus").glob("*.txt"))
MRPC = REPO / "sample_data" / "glue" / "MRPC" / "train.tsv"
_FINAL = re.compile(r"[.!?][\"')\]]*$")


def paper_paragraphs() -> list[list[str]]:
    """Documents of the bundled corpus, each a list of its sentences (lines)."""
    paragraphs = []
    for path in CORPUS:
        for block in path.read_text(encoding="utf-8").split("\n\n"):
            lines = [line.strip() for line in block.split("\n") if line.strip()]
            if len(lines) >= 2:
                paragraphs.append(lines)
    return paragraphs


def mrpc_paragraphs(group: int = 5) -> list[list[str]]:
    """Distinct MRPC training sentences, `group` to a paragraph."""
    seen, sentences = set(), []
    with open(MRPC, encoding="utf-8-sig", newline="") as f:
        for row in csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE):
            for text in (row["#1 String"], row["#2 String"]):
                text = text.strip()
                if text and text not in seen:
                    seen.add(text)
                    sentences.append(text)
    return [sentences[i : i + group] for i in range(0, len(sentences), group)]


def _boundaries(sentences: list[str]) -> tuple[list[int], list[bool]]:
    """Offsets (in non-space characters) after each sentence but the last, and
    whether that sentence ends like a sentence."""
    offsets, final, total = [], [], 0
    for sentence in sentences[:-1]:
        total += len("".join(sentence.split()))
        offsets.append(total)
        final.append(bool(_FINAL.search(sentence.strip())))
    return offsets, final


def score(paragraphs, split) -> dict:
    """Counts of true, missed and spurious boundaries of `split` on `paragraphs`."""
    counts = {
        "sentences": 0,
        "boundaries": 0,
        "missed": 0,
        "spurious": 0,
        "unfindable": 0,
        "examples": [],
    }
    for sentences in paragraphs:
        counts["sentences"] += len(sentences)
        truth, final = _boundaries(sentences)
        found = set(_boundaries([s for s in split(" ".join(sentences)) if s.strip()])[0])
        for offset, is_final in zip(truth, final):
            if not is_final:
                counts["unfindable"] += 1
                continue
            counts["boundaries"] += 1
            if offset not in found:
                counts["missed"] += 1
                if len(counts["examples"]) < 3:
                    counts["examples"].append(("missed", sentences, offset))
        spurious = found - set(truth)
        counts["spurious"] += len(spurious)
        if spurious and len(counts["examples"]) < 6:
            counts["examples"].append(("spurious", sentences, min(spurious)))
    return counts


def splitters(names: list[str]) -> dict:
    """name -> (version, function text -> sentences); imports only what is asked."""
    from importlib import metadata

    chosen = {}
    for name in names:
        if name == "sentencex":
            import sentencex

            chosen[name] = lambda text: list(sentencex.segment("en", text))
        elif name == "pysbd":
            import pysbd

            segmenter = pysbd.Segmenter(language="en", clean=False)
            chosen[name] = segmenter.segment
        elif name == "blingfire":
            import blingfire

            chosen[name] = lambda text: blingfire.text_to_sentences(text).split("\n")
        elif name == "nupunkt":
            import nupunkt

            chosen[name] = nupunkt.sent_tokenize
        elif name == "ours":
            from data_prep.text import sentences

            chosen[name] = sentences.split_sentences
        else:
            raise ValueError("unknown splitter %r" % name)
    package = {"ours": "nupunkt"}
    return {name: (metadata.version(package.get(name, name)), fn) for name, fn in chosen.items()}


def _context(sentences, offset, width=40) -> str:
    text = " ".join(sentences)
    seen = 0
    for i, char in enumerate(text):
        if not char.isspace():
            seen += 1
        if seen == offset:
            return "...%s | %s..." % (
                text[max(0, i + 1 - width) : i + 1],
                text[i + 1 : i + 1 + width].lstrip(),
            )
    return text[-width:]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--splitters", default="sentencex,pysbd,blingfire,nupunkt")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--examples", action="store_true", help="print a few errors of each splitter"
    )
    args = parser.parse_args()
    sets = {"paper": paper_paragraphs(), "mrpc": mrpc_paragraphs()}
    chars = sum(len(" ".join(p)) for ps in sets.values() for p in ps)
    print(
        "paper: %d paragraphs, %d sentences; mrpc: %d paragraphs, %d sentences; "
        "%d characters"
        % (
            len(sets["paper"]),
            sum(map(len, sets["paper"])),
            len(sets["mrpc"]),
            sum(map(len, sets["mrpc"])),
            chars,
        )
    )
    print(
        "| splitter | version | paper missed / spurious (of boundaries) | "
        "mrpc missed / spurious | errors per 1,000 sentences | chars/s |"
    )
    print("|---|---|---|---|---|---|")
    for name, (version, split) in splitters(args.splitters.split(",")).items():
        split("Loads the model. Builds the tables.")  # One-time set-up, untimed.
        best = float("inf")
        for _ in range(args.repeats):
            start = time.perf_counter()
            for paragraphs in sets.values():
                for sentences in paragraphs:
                    split(" ".join(sentences))
            best = min(best, time.perf_counter() - start)
        results = {key: score(paragraphs, split) for key, paragraphs in sets.items()}
        errors = sum(r["missed"] + r["spurious"] for r in results.values())
        total = sum(r["sentences"] for r in results.values())
        print(
            "| %s | %s | %s | %s | %.1f | %.0fk |"
            % (
                name,
                version,
                *[
                    "%d / %d (%d)" % (r["missed"], r["spurious"], r["boundaries"])
                    for r in results.values()
                ],
                1000.0 * errors / total,
                chars / best / 1000,
            )
        )
        if args.examples:
            for key, r in results.items():
                for kind, sentences, offset in r["examples"]:
                    print("    %s %s: %s" % (key, kind, _context(sentences, offset)))


if __name__ == "__main__":
    main()
