"""What program a model's reply means: rewrites fenced or bare, SEARCH/REPLACE blocks, and what fails."""

from __future__ import annotations

import pytest

from search.proposers.llm.edits import EditError, apply_reply

PARENT = '''"""LRU."""


def priority(b, p):
    age = b.now - b.last_access
    return -age
'''
FUNCTIONS = ["priority"]
CHILD = "def priority(b, p):\n    return b.hits - b.age\n"


def block(search: str, replace: str) -> str:
    return f"<<<<<<< SEARCH\n{search}=======\n{replace}>>>>>>> REPLACE\n"


@pytest.mark.parametrize(
    "reply",
    [
        CHILD,
        f"```python\n{CHILD}```",
        f"Here is a better policy:\n\n```python\n{CHILD}```\n\nIt keeps hot blocks.",
        f"```\n{CHILD}```",
        f"Sure. The idea is to keep hot blocks.\n\n{CHILD}\nThis should beat LRU.",
        f"<think>Maybe ```python\ndef priority(b, p):\n    return 0\n``` no.</think>\n```python\n{CHILD}```",
        f"```python\n{CHILD}",  # cut off by a length limit before the closing fence
    ],
    ids=["bare", "fenced", "fenced-in-prose", "fence-without-language", "bare-in-prose", "think", "unclosed"],
)
def test_a_rewrite_is_found_however_it_is_wrapped(reply: str) -> None:
    edit = apply_reply(reply, PARENT, FUNCTIONS)
    assert (edit.kind, edit.source) == ("rewrite", CHILD)


def test_of_several_fenced_blocks_the_last_complete_program_wins() -> None:
    first = CHILD.replace("b.hits", "b.depth")
    reply = f"First try:\n```python\n{first}```\nBetter:\n```python\n{CHILD}```\n"
    reply += "Usage: ```python\nprint(priority(b, p))\n```"
    assert apply_reply(reply, PARENT, FUNCTIONS).source == CHILD


def test_code_outside_the_subset_is_extracted_for_the_static_check_to_reject() -> None:
    outside = "import os\n\n\ndef priority(b, p):\n    return os.getpid()\n"
    assert apply_reply(f"Try this:\n{outside}", PARENT, FUNCTIONS).source == outside


@pytest.mark.parametrize(
    ("written", "meant"),
    [
        ("import math\n\n\ndef priority(b, p):\n    return math.log(b.hits + 1)\n", "log(b.hits + 1)"),
        ("import numpy as np\n\ndef priority(b, p):\n    return np.sqrt(b.age)\n", "sqrt(b.age)"),
        ("from math import exp\n\n\ndef priority(b, p):\n    return exp(-b.age)\n", "exp(-b.age)"),
        ("import os\nimport math\n\n\ndef priority(b, p):\n    return b.hits - b.age\n", "b.hits - b.age"),
    ],
    ids=["module-call", "aliased-module", "from-import", "unused"],
)
def test_an_import_made_of_habit_is_dropped_and_its_calls_written_as_the_subset_spells_them(
    written: str, meant: str
) -> None:
    edit = apply_reply(f"```python\n{written}```", PARENT, FUNCTIONS)
    assert edit.source.strip() == f"def priority(b, p):\n    return {meant}"
    assert len(edit.mends) == written.count("import ") and all("dropped" in m for m in edit.mends)


@pytest.mark.parametrize(
    "written",
    [
        "import numpy as np\n\n\ndef priority(b, p):\n    return np.mean(b.age)\n",  # not a subset call
        "import math\n\n\ndef priority(b, p):\n    return math.pi * b.age\n",  # not a call at all
        "import math; X = 1\n\n\ndef priority(b, p):\n    return math.log(b.age)\n",  # shares its line
    ],
    ids=["other-call", "attribute", "shared-line"],
)
def test_an_import_the_program_needs_stays_for_the_static_check_to_name(written: str) -> None:
    edit = apply_reply(written, PARENT, FUNCTIONS)
    assert (edit.source, edit.mends) == (written, ())


def test_a_params_entry_written_as_a_bare_value_becomes_a_range_a_decade_either_side_of_it() -> None:
    written = 'PARAMS = {"w": 2.5e6, "k": -3, "z": 0, "r": (1, 5)}\n\n\ndef priority(b, p):\n    return p.w\n'
    edit = apply_reply(written, PARENT, FUNCTIONS)
    assert 'PARAMS = {"w": (250000, 2.5e+07, "log", 2.5e+06), "k": (-30, -0.3, -3), "z": 0, "r": (1, 5)}' in (
        edit.source
    )
    assert edit.mends == ("PARAMS w ranged", "PARAMS k ranged"), "zero has no decade: the checker names it"


def test_search_replace_blocks_apply_in_order_to_the_parent() -> None:
    reply = block("    age = b.now - b.last_access\n", "    age = b.age\n") + block(
        "    return -age\n", "    return -age + b.hits\n"
    )
    edit = apply_reply(f"Two changes:\n\n{reply}", PARENT, FUNCTIONS)
    assert edit.kind == "diff" and edit.blocks == 2
    expected = PARENT.replace("b.now - b.last_access", "b.age").replace("-age\n", "-age + b.hits\n")
    assert edit.source == expected


def test_a_block_tolerates_fences_and_lost_trailing_whitespace() -> None:
    reply = "```\n" + block("    return -age   \n", "    return -age + 1\n") + "```"
    assert apply_reply(reply, PARENT, FUNCTIONS).source == PARENT.replace("-age\n", "-age + 1\n")


@pytest.mark.parametrize(
    ("reply", "kind", "words"),
    [
        ("I would evict the oldest block.", "no-code", "no Python program with def priority"),
        ("```python\nx = 1\n```", "no-code", "def priority"),
        ("```python\ndef priority(b, p):\n    return (b.age\n```", "syntax", "does not parse: line 2"),
        (block("    return age\n", "    return 0\n"), "diff-mismatch", "block 1 ('return age'...) is not in"),
        (block("\n", "x\n"), "diff-mismatch", "empty SEARCH"),
        ("<<<<<<< SEARCH\n    return -age\n=======\n    return 0\n", "unparsable", "not closed"),
        (block("    return -age\n", "    return (\n"), "syntax", "after the SEARCH/REPLACE blocks"),
    ],
    ids=["prose", "no-function", "syntax", "not-in-parent", "empty", "unclosed", "breaks-parent"],
)
def test_a_reply_that_yields_no_program_says_why_in_one_line(reply: str, kind: str, words: str) -> None:
    with pytest.raises(EditError) as info:
        apply_reply(reply, PARENT, FUNCTIONS)
    assert info.value.kind == kind
    assert words in str(info.value) and "\n" not in str(info.value)


def test_a_search_part_that_occurs_twice_is_refused_rather_than_guessed() -> None:
    parent = "def priority(b, p):\n    if b.hits > 3:\n        return b.age\n    return b.age\n"
    with pytest.raises(EditError, match="occurs 2 times; include more lines") as info:
        apply_reply(block("return b.age\n", "return 0\n"), parent, FUNCTIONS)
    assert info.value.kind == "diff-mismatch"
