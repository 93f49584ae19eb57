"""Answers over a team's own handbooks, with no model: the extractive answer or "not covered".

Three small workspaces of the kind this project's users search (``bench/handbooks/``):

- ``staff``: an HR handbook and an IT security rule in Chinese, an IT help desk FAQ in
  English; 44 questions answered by them and 15 they do not answer. Written while the
  extractive answer was changed for them (2026-12-06): its figures are not a held-out test;
- ``expense`` (an expense policy in Chinese, an office guide in English; 17 + 8) and
  ``cloud`` (a cloud-drive FAQ in Chinese; 13 + 8): written after that change and not
  changed since, so they are;
- ``across`` (4 questions over the staff handbook, three in Chinese answered by its English
  FAQ and found by a Latin word, one the reverse; 2026-12-07, written with the change they
  measure);
- ``ops`` (an on-call rule, a release rule and a production-access rule in Chinese, a
  database runbook in English; 24 + 8) and ``procure`` (a purchasing rule and an asset rule
  in Chinese, a security-incident guide in English; 21 + 8): written 2026-12-07 and measured
  before anything was changed for them. ``ops``' o8 ("大促期间能发版吗？", which found nothing)
  then led to the index's character pairs (:func:`~shelfhand.knowledge.analysis.unknown_pairs`);
- ``support`` (a customer-service rule and a returns-and-compensation rule in Chinese, a data
  retention policy in English; 26 + 8, two of them asked across the languages): written
  2026-12-07 after that day's changes to the extractive answer and the answer check, and
  measured against the tree before them, changed for nothing;
- ``combined`` (2026-12-07): every case of the sets above over one workspace holding all six
  handbooks (16 documents), as a team's workspace holds several; where another handbook
  answers a question its own does not, ``combined.jsonl`` says what the answer is then (or
  leaves the case out where no answer is clearly right). ``--noise DATA [DATA ...]`` adds
  documents of no team's to that workspace: the first ``--noise-docs`` passages (default
  1,000) of each BEIR corpus named (``../shared/data/cmrc2018``: Chinese encyclopedia
  articles; ``scifact``: English abstracts), one file each, as a workspace shared with other
  material holds them.

Each workspace is ingested (the default embedders) into a temporary folder by each tree, in
a child process with that tree's ``src`` first on the path (a tree's analysis builds its
own index), and ``shelfhand eval-answers --no-model`` runs over it::

    python bench/handbooks.py --trees <before worktree> . [--show] [--only combined]

``--show`` prints each case whose verdict differs between the trees.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent / "handbooks"
SETS = {
    "staff": "staff",
    "expense": "expense",
    "cloud": "cloud",
    "across": "staff",
    "ops": "ops",
    "procure": "procure",
    "support": "support",
}
"""Each case set (``<set>-cases.jsonl``) and the handbook it asks: ``across`` asks the staff
handbook in the other language than the passage that answers (2026-12-07)."""


def _eval(tree: Path, workspace: Path, cases: Path) -> dict[str, object]:
    env = {**os.environ, "PYTHONPATH": str(tree / "src")}
    for name in ("SHELFHAND_MODEL", "OPENAI_BASE_URL"):
        env.pop(name, None)
    out = subprocess.run(
        [sys.executable, "-m", "shelfhand.cli", "eval-answers", str(cases), "-w",
         str(workspace), "--no-model", "--json"],
        env=env, capture_output=True, text=True, check=True,
    )  # fmt: skip
    report: dict[str, object] = json.loads(out.stdout)
    return report


def _ingested(tree: Path, folder: Path, workspace: Path) -> Path:
    """``workspace`` holding ``folder``, ingested by ``tree`` (once)."""
    if not workspace.exists():
        subprocess.run(
            [sys.executable, "-m", "shelfhand.cli", "ingest", str(folder), "-w", str(workspace)],
            env={**os.environ, "PYTHONPATH": str(tree / "src")},
            capture_output=True, check=True,
        )  # fmt: skip
    return workspace


def _combined_cases(into: Path) -> Path:
    """Every set's cases, ids prefixed by their set, as ``combined.jsonl`` amends them for a
    workspace holding all the handbooks; written to ``into``."""
    amended = {
        (line["set"], line["id"]): line
        for line in map(json.loads, (HERE / "combined.jsonl").read_text().splitlines())
    }
    lines = []
    for name in SETS:
        for raw in (HERE / f"{name}-cases.jsonl").read_text().splitlines():
            case = json.loads(raw)
            change = amended.get((name, case["id"]))
            if change is not None and change.get("skip"):
                continue
            if change is not None:  # another handbook answers it
                case.pop("not_found", None)
                case["facts"] = change["facts"]
            lines.append(json.dumps({**case, "id": f"{name}:{case['id']}"}, ensure_ascii=False))
    into.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return into


def _noise(into: Path, corpora: list[Path], docs: int) -> list[Path]:
    """The first ``docs`` passages of each BEIR corpus of ``corpora``, a Markdown file each
    (``# title`` and the text) in a folder of ``into`` per corpus."""
    folders = []
    for corpus in corpora:
        folder = into / f"noise-{corpus.name}"
        folder.mkdir(parents=True, exist_ok=True)
        with (corpus / "corpus.jsonl").open(encoding="utf-8") as lines:
            for _, line in zip(range(docs), lines, strict=False):
                row = json.loads(line)
                text = f"# {row.get('title') or row['_id']}\n\n{row['text']}\n"
                (folder / f"{row['_id']}.md").write_text(text, encoding="utf-8")
        folders.append(folder)
    return folders


def _all_ingested(tree: Path, workspace: Path, noise: list[Path]) -> Path:
    """``workspace`` holding every handbook (and the ``noise`` folders), ingested by ``tree``
    (once)."""
    if not workspace.exists():
        for folder in [*(HERE / f for f in dict.fromkeys(SETS.values())), *noise]:
            subprocess.run(
                [sys.executable, "-m", "shelfhand.cli", "ingest", str(folder), "-w",
                 str(workspace)],
                env={**os.environ, "PYTHONPATH": str(tree / "src")},
                capture_output=True, check=True,
            )  # fmt: skip
    return workspace


def _verdicts(report: dict[str, object]) -> dict[str, bool]:
    results = report["results"]
    assert isinstance(results, list)
    return {r["id"]: bool(r["right"]) for r in results}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--trees", nargs="+", type=Path, default=[Path(".")])
    parser.add_argument("--show", action="store_true")
    parser.add_argument("--only", nargs="+", choices=[*SETS, "combined"], help="these sets only")
    parser.add_argument("--noise", nargs="+", type=Path, default=[], help="BEIR folders")
    parser.add_argument("--noise-docs", type=int, default=1000)
    args = parser.parse_args()
    trees = [t.resolve() for t in args.trees]
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.only or [*SETS, "combined"]:
            if name == "combined":
                cases = _combined_cases(Path(tmp) / "combined-cases.jsonl")
                noise = _noise(Path(tmp), args.noise, args.noise_docs)
                workspaces = [
                    _all_ingested(t, Path(tmp) / str(at) / "all", noise)
                    for at, t in enumerate(trees)
                ]
            else:
                cases = HERE / f"{name}-cases.jsonl"
                workspaces = [
                    _ingested(t, HERE / SETS[name], Path(tmp) / str(at) / SETS[name])
                    for at, t in enumerate(trees)
                ]
            reports = [_eval(t, w, cases) for t, w in zip(trees, workspaces, strict=True)]
            for tree, report in zip(trees, reports, strict=True):
                print(
                    f"{name:8} {tree!s:40} answered right {report['right_count']}/"
                    f"{report['answerable']}, not covered right {report['not_found_count']}"
                )
            if args.show and len(reports) > 1:
                first, *rest = (_verdicts(r) for r in reports)
                for other in rest:
                    for case, right in first.items():
                        if other.get(case) != right:
                            print(f"  {case}: {right} -> {other.get(case)}")


if __name__ == "__main__":
    main()
