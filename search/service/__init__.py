"""The run service: every front end creates, resumes, executes, stops and reads runs through it, and opens
a store only through `open_service`; the read model's answers are plain data the front ends draw."""

from search.all_settings import SETTINGS
from search.loop.search import Reporter
from search.proposers.base import ProposerUnavailable
from search.service.detached import beside_store, keep_upload, launch
from search.service.runs import (
    RunService,
    load_target,
    open_service,
    prepare,
    proposer_for,
    proposer_kind,
    proposer_names,
    proposer_of,
    target_names,
)
from search.settings import DEFAULT_STORE, STORE_ENV, redacted
from search.stats.importance import NoImportance
from search.store.readmodel import (
    BaselineInfo,
    BaselineRef,
    Budget,
    CandidateInfo,
    CandidateRef,
    EvaluationInfo,
    EventInfo,
    HoldoutReport,
    HoldoutRow,
    ProgressPoint,
    ProposerStats,
    ReadModel,
    RunInfo,
    RunReport,
    StudyPoint,
    StudyReport,
    Verdict,
    VerificationCounts,
)
from search.store.store import StoreError
from search.terms import BASELINE, UNSEEN
from targets.base import Option, OptionError

__all__ = [
    "BASELINE",
    "DEFAULT_STORE",
    "SETTINGS",
    "STORE_ENV",
    "UNSEEN",
    "BaselineInfo",
    "BaselineRef",
    "Budget",
    "CandidateInfo",
    "CandidateRef",
    "EvaluationInfo",
    "EventInfo",
    "HoldoutReport",
    "HoldoutRow",
    "NoImportance",
    "Option",
    "OptionError",
    "ProgressPoint",
    "ProposerStats",
    "ProposerUnavailable",
    "ReadModel",
    "Reporter",
    "RunInfo",
    "RunReport",
    "RunService",
    "StoreError",
    "StudyPoint",
    "StudyReport",
    "Verdict",
    "VerificationCounts",
    "beside_store",
    "keep_upload",
    "launch",
    "load_target",
    "open_service",
    "prepare",
    "proposer_for",
    "proposer_kind",
    "proposer_names",
    "proposer_of",
    "redacted",
    "target_names",
]
