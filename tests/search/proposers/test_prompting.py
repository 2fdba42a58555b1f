"""Prompts come from the target and the search state, through templates a user can replace."""

from __future__ import annotations

from pathlib import Path

import pytest

import targets
from search.loop.search import brief
from search.proposers.base import Entry, ProposalRequest
from search.proposers.llm.prompting import Templates, estimated_tokens
from targets.kv.features import BLOCK_FEATURES
from verifiers.static import CALLS

KV = targets.load("kv")
BASELINES = KV.baselines()


def request(failures: tuple[str, ...] = ()) -> ProposalRequest:
    metrics = {"block_hit_rate": 0.3125, "token_hit_rate": 0.33}
    parent = Entry(7, BASELINES["gdsf"], 0.3125, metrics, {"w": 2.5})
    inspirations = (Entry(3, BASELINES["lfu"], 0.25), Entry(4, BASELINES["slru"], 0.29))
    return ProposalRequest(brief(KV), parent, inspirations, failures, seed=1)


def prompt(templates: Templates, req: ProposalRequest) -> str:
    return "\n".join(m["content"] for m in templates.messages(req))


def test_the_kv_prompt_carries_the_target_and_every_feature_of_its_registry() -> None:
    text = prompt(Templates.load(), request())
    assert KV.description in text
    assert "def priority(b, p):" in text and "lowest score is evicted first" in text
    for feature in BLOCK_FEATURES.features:
        unit = f"{feature.unit}, clock" if feature.clock else feature.unit
        line = f"b.{feature.name} ({unit}, in [{feature.low:g}, {feature.high:g}]): {feature.doc}"
        assert line in text
    assert "b.now (s, clock, in [0, 1e+12])" in text and "a threshold on it splits the trace in time" in text
    assert "b.next_use" not in text, "the oracle column is no feature a candidate may read"


def test_functions_that_read_the_same_features_list_them_once() -> None:
    tiered = targets.load("kv-tiered")
    source = next(iter(tiered.baselines().values()))
    req = ProposalRequest(brief(tiered), Entry(1, source, 0.5), (), (), seed=1)
    text = prompt(Templates.load(), req)
    assert text.count("    b.recompute_ms (ms") == 1
    assert "def keep(b, p):" in text and "reads the same features of `b` as priority()" in text
    assert "def below(b, p):" in text


def test_the_prompt_states_the_allowed_subset_from_the_checker() -> None:
    text = prompt(Templates.load(), request())
    assert all(f"{name}(" in text for name in CALLS)
    assert "at most 16" in text and "imports" in text


def test_the_prompt_shows_parent_with_metrics_inspirations_and_failures() -> None:
    failure = "candidate 12: static check: line 4: [unknown-attribute] 'b.recompute_ms' is not a feature"
    text = prompt(Templates.load(), request((failure,)))
    assert BASELINES["gdsf"].strip() in text
    assert "Candidate #7: block_hit_rate = 0.3125; token_hit_rate = 0.33" in text
    assert "Tuned PARAMS: w = 2.5" in text
    assert "Candidate #3 (block_hit_rate = 0.25)" in text and BASELINES["lfu"].strip() in text
    assert "Candidate #4 (block_hit_rate = 0.29)" in text
    assert f"- {failure}" in text


def shown(turn: list[dict[str, str]]) -> list[str]:
    """The inspirations a turn's prompt shows, by the name it gives them."""
    return [name for name in ("#3", "#4") if f"Candidate {name} (" in turn[1]["content"]]


def test_a_turn_that_fits_is_the_whole_conversation() -> None:
    templates, req = Templates.load(), request()
    history = [({"role": "assistant", "content": "no code"}, templates.repair_message(req, "no program"))]
    whole = templates.fitted(req, history, room=None)
    assert whole == [*templates.messages(req), *history[0]]
    assert templates.fitted(req, history, room=estimated_tokens(whole)) == whole


def test_a_prompt_too_long_for_the_context_shows_fewer_inspirations_the_last_first() -> None:
    templates, req = Templates.load(), request()
    whole = templates.fitted(req, [], room=None)
    one = templates.fitted(req, [], room=estimated_tokens(whole) - 1)
    none = templates.fitted(req, [], room=estimated_tokens(one) - 1)
    assert (shown(whole), shown(one), shown(none)) == (["#3", "#4"], ["#3"], [])
    assert "None yet." in none[1]["content"]
    for turn in (one, none):  # the registry and the parent always stay
        assert "b.hits (" in turn[0]["content"] + turn[1]["content"]
        assert BASELINES["gdsf"].strip() in turn[1]["content"]
    assert templates.fitted(req, [], room=1) == none, "sent even when nothing fits: the server decides"


def test_a_long_repair_conversation_leaves_out_its_older_replies_before_any_inspiration() -> None:
    templates, req = Templates.load(), request()
    first = ({"role": "assistant", "content": "x" * 3000}, templates.repair_message(req, "no program"))
    last = ({"role": "assistant", "content": "y = 1"}, templates.repair_message(req, "no def priority"))
    whole = templates.fitted(req, [first, last], room=None)
    turn = templates.fitted(req, [first, last], room=estimated_tokens(whole) - 1)
    assert turn == [*templates.messages(req), *last]
    assert shown(turn) == ["#3", "#4"]


def test_the_repair_turn_quotes_the_error() -> None:
    error = "the reply holds no Python program with def priority(...)"
    turn = Templates.load().repair_message(request(), error)
    assert turn["role"] == "user"
    assert "could not be used: the reply holds no Python program" in turn["content"]


def test_a_template_folder_replaces_the_shipped_files_by_name(tmp_path: Path) -> None:
    (tmp_path / "user.md").write_text("Beat $$1 of #$target: improve\n$parent\nFailures: $failures\n")
    templates = Templates.load(str(tmp_path))
    system, user = templates.messages(request(("candidate 1: oops",)))
    assert system["content"] == Templates.load().messages(request())[0]["content"], "system.md stays shipped"
    assert user["content"].startswith("Beat $1 of #kv: improve\n")
    assert user["content"].endswith("Failures: - candidate 1: oops\n")


@pytest.mark.parametrize(
    ("name", "text", "words"),
    [
        ("user.md", "Improve $parnet", "uses unknown $parnet"),
        ("system.md", "Costs $5", "'$' that starts no placeholder"),
        ("user.md", "Fix $error", "uses unknown $error"),
    ],
)
def test_a_bad_template_is_refused_in_one_line(tmp_path: Path, name: str, text: str, words: str) -> None:
    (tmp_path / name).write_text(text)
    with pytest.raises(ValueError, match="prompt template") as info:
        Templates.load(str(tmp_path))
    assert words in str(info.value) and str(tmp_path / name) in str(info.value)


def test_a_missing_template_folder_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="does not exist"):
        Templates.load(str(tmp_path / "nope"))
