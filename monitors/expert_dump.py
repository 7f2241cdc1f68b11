"""A server's expert load, read from the file its recorder writes, without torch.

SGLang, started with `--expert-distribution-recorder-mode stat`, counts each layer's routing; on
`/dump_expert_distribution_record` it writes `torch.save({"rank", "logical_count",
"average_utilization_rate_over_window"})` to `expert_distribution_recorder_<time>.pt` in its
`SGLANG_EXPERT_DISTRIBUTION_RECORDER_DIR`, and resets (sglang/srt/eplb/expert_distribution.py).
`logical_count` is int32 [forward passes buffered, layers, logical experts]: a circular buffer
leaves its unused rows zero. lmdeploy's recorder (its pull request #3709, with
`LMDEPLOY_DUMP_EXPERT_DISTRIBUTION=1`) answers the same endpoint by writing `{"counts", "balancedness",
"total_tokens", "step", "rank"}` to `rank<r>_step<n>_expert_counts.pt` in `LMDEPLOY_EXPERT_DUMP_DIR`:
`counts` int64 [layers, experts] summed since the recording started, `step` the forward passes.
Neither comes back over HTTP, so tokentop reads the file beside the server. attach runs without
torch, and a pickle can name any callable: the unpickler here builds only a tensor's bytes, its
storages' types and an OrderedDict, and refuses every other name."""

from __future__ import annotations

import pickle
import sys
import zipfile
from array import array
from collections import OrderedDict
from dataclasses import dataclass

# A torch storage type's name → array typecode and element size: the integer counts SGLang writes.
STORAGES = {"IntStorage": ("i", 4), "LongStorage": ("q", 8)}
MAX_BYTES = 1 << 30  # a dump of DeepSeek-V3 (61 layers × 256 experts) with a 1000-pass buffer is 62 MB


class DumpError(Exception):
    """Why a file is not an expert dump tokentop can read: one line."""


@dataclass
class ExpertDump:
    counts: list[list[int]]  # per layer, per logical expert: the positions routed to it, summed over the passes
    passes: int  # the buffered forward passes that routed any position
    last_hits: int | None  # distinct (layer, expert) pairs the last of them routed to; None: a sum has no passes
    utilization: float | None  # SGLang's balancedness over its window, where its metrics are on


@dataclass
class _Storage:
    kind: str
    key: str
    numel: int


@dataclass
class _Tensor:
    storage: _Storage
    offset: int
    size: tuple
    stride: tuple


def _rebuild_tensor_v2(storage, offset, size, stride, requires_grad=False, hooks=None, metadata=None):
    return _Tensor(storage, offset, tuple(size), tuple(stride))


class _Unpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str):
        if (module, name) == ("torch._utils", "_rebuild_tensor_v2"):
            return _rebuild_tensor_v2
        if module == "torch" and name.endswith("Storage"):  # a type's name: only the counts' must be an integer one
            return name
        if (module, name) == ("collections", "OrderedDict"):
            return OrderedDict
        raise DumpError(f"it names {module}.{name}, which no expert dump holds (not loaded)")

    def persistent_load(self, pid):
        if not (isinstance(pid, tuple) and len(pid) == 5 and pid[0] == "storage"):
            raise DumpError("a storage reference of an unknown form")
        _, kind, key, _location, numel = pid
        return _Storage(str(kind), str(key), int(numel))  # its bytes are read only where it holds the counts


def read_dump(path: str) -> ExpertDump:
    """The routing a stat-mode dump (SGLang's) or a counts dump (lmdeploy's) holds, summed over
    its passes; DumpError says why not."""
    try:
        with zipfile.ZipFile(path) as z:
            names = z.namelist()
            pkl = next((n for n in names if n.endswith("/data.pkl") or n == "data.pkl"), None)
            if pkl is None:
                raise DumpError("no data.pkl inside: not a torch.save file")
            prefix = pkl[: -len("data.pkl")]
            data = _Unpickler(z.open(pkl)).load()
            key = next((k for k in ("logical_count", "counts") if isinstance(data, dict) and k in data), None)
            if key is None:
                keys = ", ".join(map(str, data)) if isinstance(data, dict) else type(data).__name__
                raise DumpError(f"no logical_count nor counts (it holds {keys}): a stat-mode dump is read, not a per_token one")
            tensor, dims = data[key], 3 if key == "logical_count" else 2
            if not isinstance(tensor, _Tensor) or len(tensor.size) != dims:
                raise DumpError(f"{key} is not a tensor of [{'passes, ' if dims == 3 else ''}layers, experts]")
            if tensor.storage.kind not in STORAGES:
                raise DumpError(f"its counts are a {tensor.storage.kind}, not integers")
            order = z.read(prefix + "byteorder").decode().strip() if prefix + "byteorder" in names else "little"
            info = z.getinfo(f"{prefix}data/{tensor.storage.key}")
            if info.file_size > MAX_BYTES:
                raise DumpError(f"its counts take {info.file_size} bytes, over the {MAX_BYTES} read")
            raw = z.read(info)
    except (OSError, zipfile.BadZipFile, KeyError, EOFError, pickle.UnpicklingError, UnicodeDecodeError) as exc:
        raise DumpError(f"unreadable: {exc}") from None
    values = array(STORAGES[tensor.storage.kind][0])
    try:
        values.frombytes(raw)
    except ValueError as exc:
        raise DumpError(f"its storage is cut short: {exc}") from None
    if order != sys.byteorder:
        values.byteswap()
    if dims == 2:  # lmdeploy's: one sum, its passes counted beside it
        step = data.get("step")
        summed = _summed(values, _Tensor(tensor.storage, tensor.offset, (1, *tensor.size), (0, *tensor.stride)), None)
        return ExpertDump(summed.counts, step if isinstance(step, int) and step >= 0 else summed.passes, None, None)
    util = data.get("average_utilization_rate_over_window")
    return _summed(values, tensor, util if isinstance(util, (int, float)) else None)


def _summed(values: array, t: _Tensor, utilization: float | None) -> ExpertDump:
    passes, layers, experts = t.size
    s0, s1, s2 = t.stride
    last = t.offset + (passes - 1) * s0 + (layers - 1) * s1 + (experts - 1) * s2
    if min(t.size) <= 0 or t.offset < 0 or last >= len(values):
        raise DumpError(f"the counts {list(t.size)} do not fit their storage of {len(values)}")
    totals = [0] * (layers * experts)
    used, last_row = 0, None
    for p in range(passes):
        base = t.offset + p * s0
        if (s1, s2) == (experts, 1):  # contiguous rows, as SGLang's buffer is: one slice a pass
            row = values[base : base + layers * experts]
        else:
            row = array(values.typecode, (values[base + li * s1 + e * s2] for li in range(layers) for e in range(experts)))
        if row.count(0) == len(row):  # a circular buffer's unused pass
            continue
        used, last_row = used + 1, row
        totals = [a + b for a, b in zip(totals, row, strict=True)]
    counts = [totals[li * experts : (li + 1) * experts] for li in range(layers)]
    hits = 0 if last_row is None else len(last_row) - last_row.count(0)
    return ExpertDump(counts, used, hits, utilization)
