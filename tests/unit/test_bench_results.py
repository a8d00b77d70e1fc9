"""Every raw benchmark output names the card it ran on: its file name's machine tag is in results/README.md's table,
and any card a file reports itself (nvidia-smi's line, the benchmark's `device_name`) is the card the table gives."""
from __future__ import annotations

import re
from pathlib import Path

RESULTS = Path(__file__).resolve().parents[2] / "engine" / "bench" / "results"
NAME = re.compile(r"^(\d{4}-\d{2}-\d{2})-([a-z0-9]+)-")
ROW = re.compile(r"^\| `([a-z0-9]+)` \| ([^|]+) \|", re.M)
REPORTED = re.compile(r'"device_name": "([^"]+)"|^(NVIDIA [^,\n]+), \d+ MiB', re.M)


def table() -> dict[str, str]:
    return {tag: card.strip() for tag, card in ROW.findall((RESULTS / "README.md").read_text())}


def test_every_raw_file_names_its_card():
    cards = table()
    assert cards.get("h100a") == "NVIDIA H100 80GB HBM3"
    files = [p for p in RESULTS.iterdir() if p.name != "README.md"]
    assert files
    for path in files:
        found = NAME.match(path.name)
        assert found, f"{path.name}: not <date>-<machine>-..."
        tag = found.group(2)
        assert tag in cards, f"{path.name}: machine {tag} is not in results/README.md's table"
        for by_json, by_smi in REPORTED.findall(path.read_text(errors="replace")):
            reported = by_json or by_smi
            assert reported == cards[tag], f"{path.name} reports {reported}, the table says {cards[tag]}"


def test_links_to_raw_files_lead_somewhere():
    """The figures' table and the README name raw files by path: each named file exists."""
    text = (RESULTS.parent / "README.md").read_text() + (RESULTS / "README.md").read_text()
    named = set(re.findall(r"(2026-\d{2}-\d{2}-[a-z0-9]+-c\d+-[\w.-]+\.(?:jsonl|err|txt))", text))
    assert named
    missing = [n for n in named if not (RESULTS / n).exists()]
    assert missing == [], missing
