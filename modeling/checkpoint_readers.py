"""Reading the checkpoints BERT users have: original TF1, Hugging Face, and our TF2.

`open_checkpoint(path)` resolves a path (see `resolve_checkpoint` for the rules) and
gives a reader with `kind` ('tf1' | 'hf' | 'tf2'), `path` (resolved), `shapes`
{name: shape}, `get(name)` -> np.ndarray, `stored_kind` (the model kind the checkpoint
says it holds, or None) and `side_dirs` (the folders whose bert_config.json,
config.json, vocab.txt, model_info.json and tokenizer_config.json describe it).
"""

from __future__ import annotations

import glob
import json
import os
import re
import struct

import numpy as np
import tensorflow as tf

from common.errors import DamagedFileError, MissingFileError, UserError
from common import file_io
from modeling import checkpoint_names as names

HF_WEIGHTS = "model.safetensors"
HF_INDEX = "model.safetensors.index.json"
MODEL_INFO = "model_info.json"
BEST_DIR = "best"
_NONE_TYPE = type(None)
_IGNORED_TF1 = re.compile(r"(adam_[mv]|global_step|good_steps|loss_scale)")


class CheckpointMismatchError(UserError):
    """A checkpoint does not fit the model: a variable is missing or has another shape,
    or it holds another kind of model."""


_SAFETENSORS_DTYPES = {
    "F64": np.float64,
    "F32": np.float32,
    "F16": np.float16,
    "I64": np.int64,
    "I32": np.int32,
    "U8": np.uint8,
}


def _damaged_safetensors(path: str, what: str) -> DamagedFileError:
    return DamagedFileError(
        path,
        None,
        f"not a valid safetensors file: {what} (the file is damaged or was cut short: "
        f"download or write it again)",
    )


def _safetensors_header(path: str, data: bytes) -> tuple[dict, int]:
    """(the header's JSON object, where the tensor data starts), checked."""
    if len(data) < 8:
        raise _damaged_safetensors(path, f"{len(data)} bytes, less than its 8-byte header size")
    (header_size,) = struct.unpack("<Q", data[:8])
    if header_size > len(data) - 8:
        raise _damaged_safetensors(
            path, f"the header size says {header_size:,} bytes but {len(data) - 8:,} follow"
        )
    try:
        header = json.loads(data[8 : 8 + header_size].decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as e:
        raise _damaged_safetensors(path, f"its header is not JSON ({e})") from None
    if not isinstance(header, dict):
        raise _damaged_safetensors(path, "its header is not a JSON object")
    return header, 8 + header_size


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _safetensors_array(path: str, name: str, info, body: memoryview) -> np.ndarray:
    """One tensor of the data section, its header entry checked against the data."""
    import ml_dtypes  # shipped with TensorFlow

    if not isinstance(info, dict):
        raise _damaged_safetensors(path, f"the entry of tensor {name!r} is not an object")
    dtype, shape, offsets = info.get("dtype"), info.get("shape"), info.get("data_offsets")
    if not isinstance(dtype, str):
        raise _damaged_safetensors(path, f"tensor {name!r} has no dtype")
    np_dtype = ml_dtypes.bfloat16 if dtype == "BF16" else _SAFETENSORS_DTYPES.get(dtype)
    if np_dtype is None:
        raise UserError(f"{path}: tensor {name} has unsupported dtype {dtype}")
    if not isinstance(shape, list) or not all(map(_is_int, shape)):
        raise _damaged_safetensors(path, f"tensor {name!r} has no valid shape ({shape!r})")
    if (
        not isinstance(offsets, list)
        or len(offsets) != 2
        or not all(map(_is_int, offsets))
        or offsets[0] > offsets[1]
    ):
        raise _damaged_safetensors(path, f"tensor {name!r} has no valid data_offsets")
    start, end = offsets
    if end > len(body):
        raise _damaged_safetensors(
            path,
            f"tensor {name!r} needs bytes {start:,} to {end:,} of the data, which has "
            f"{len(body):,}",
        )
    if end - start != int(np.prod(shape)) * np.dtype(np_dtype).itemsize:
        raise _damaged_safetensors(
            path, f"tensor {name!r} of shape {shape} and dtype {dtype} is not {end - start} bytes"
        )
    array = np.frombuffer(body[start:end], dtype=np_dtype).reshape(shape)
    return array.astype(np.float32) if dtype in ("BF16", "F16") else array


def read_safetensors(path: str) -> dict:
    """Reads a safetensors file into {name: float32/int ndarray}, without PyTorch.

    Handles BF16 through ml_dtypes (numpy has no bfloat16 of its own). The header is
    checked against the data (a file cut short, a garbled header), naming the file
    and the tensor; the format has no checksum of the data itself.
    """
    with open(path, "rb") as f:
        data = f.read()
    header, data_start = _safetensors_header(path, data)
    body = memoryview(data)[data_start:]
    return {
        name: _safetensors_array(path, name, info, body)
        for name, info in header.items()
        if name != "__metadata__"
    }


def find_side_file(side_dirs, name: str) -> str | None:
    """The first `name` found in `side_dirs`, or None."""
    for directory in side_dirs:
        candidate = os.path.join(directory, name)
        if os.path.isfile(candidate):
            return candidate
    return None


def read_model_info(side_dirs, known: tuple[str | None, dict] | None = None) -> dict:
    """The `model_info.json` beside a checkpoint ({} when there is none): `model_kind`,
    `labels` and `do_lower_case` of the model it holds. `known`: (its path, its
    contents) when the caller read it already."""
    path = find_side_file(side_dirs, MODEL_INFO)
    if known is not None and known[0] == path:
        return known[1]
    return read_model_info_file(path)


def read_model_info_file(path: str | None) -> dict:
    """The contents of the model_info.json at `path` ({} for None): the one place that
    reads one."""
    return file_io.read_json_object(path, "the model's info (a JSON object)") if path else {}


def _damaged_checkpoint(prefix: str, name: str | None, error: Exception) -> DamagedFileError:
    """The error of a TF checkpoint whose index (`name` None) or the data of variable
    `name` cannot be read."""
    if name is None:
        path, where, what = prefix + ".index", None, "its index cannot be read"
    else:
        path, where, what = prefix + ".data-*", f"variable {name}", "it cannot be read"
    if isinstance(error, IndexError):  # TensorFlow's OUT_OF_RANGE: a short read.
        detail = "the data file ends before its bytes: it was cut short"
    else:
        detail = getattr(error, "message", str(error)).strip().splitlines()[0]
    return DamagedFileError(
        path,
        where,
        f"{what} ({detail}); the checkpoint is damaged or incomplete: copy or write it again",
    )


class _TF1Reader:
    kind = "tf1"

    def __init__(self, prefix: str, side_dirs, model_info=None):
        self.path, self.side_dirs = prefix, side_dirs
        try:
            self._reader = tf.train.load_checkpoint(prefix)
            shapes = self._reader.get_variable_to_shape_map()
        except (tf.errors.OpError, IndexError, ValueError) as e:
            raise _damaged_checkpoint(prefix, None, e) from None
        self.shapes = {k: tuple(v) for k, v in shapes.items() if not _IGNORED_TF1.search(k)}
        self.stored_kind = read_model_info(side_dirs, model_info).get("model_kind")

    def get(self, name: str) -> np.ndarray:
        try:
            return self._reader.get_tensor(name)
        except (tf.errors.OpError, IndexError, ValueError) as e:
            raise _damaged_checkpoint(self.path, name, e) from None

    def name_of(self, original: str) -> tuple[str, bool]:
        return original, False


class _TF2Reader(_TF1Reader):
    """Our object-based checkpoints, read by key (see checkpoint_names.tf2_entries)."""

    kind = "tf2"

    def __init__(self, prefix: str, side_dirs, model_info=None):
        super().__init__(prefix, side_dirs, model_info)
        self.shapes = {k: v for k, v in self.shapes.items() if k.startswith("model/")}
        if not any(k.startswith("model/encoder/") for k in self.shapes):
            raise CheckpointMismatchError(
                f"checkpoint {prefix} is a TF2 checkpoint without a 'model/encoder' (it "
                f"was not written by this project's training loop or writers)"
            )


def _hf_weight_files(index: str) -> list[str]:
    """The safetensors files a Hugging Face index names in its "weight_map"."""
    weight_map = file_io.read_json_object(index).get("weight_map")
    if (
        not isinstance(weight_map, dict)
        or not weight_map
        or not all(isinstance(name, str) and name for name in weight_map.values())
    ):
        raise UserError(f'{index}: "weight_map" is not an object of tensor -> file names')
    return sorted(set(weight_map.values()))


class _HFReader:
    kind = "hf"

    def __init__(self, directory: str):
        self.path, self.side_dirs = directory, [directory]
        index = os.path.join(directory, HF_INDEX)
        files = _hf_weight_files(index) if os.path.isfile(index) else [HF_WEIGHTS]
        self._tensors = {}
        for name in files:
            path = os.path.join(directory, name)
            if not os.path.isfile(path):
                raise MissingFileError(f"{path} not found (named by {HF_INDEX})")
            for key, value in read_safetensors(path).items():
                canonical = names.canonical_hf_name(key)
                if canonical != key and canonical in self._tensors:
                    continue  # Both spellings saved: keep the canonical one.
                self._tensors[canonical] = value
        self.shapes = {k: tuple(v.shape) for k, v in self._tensors.items()}
        self.prefix = "bert." if any(k.startswith("bert.") for k in self._tensors) else ""
        config = os.path.join(directory, "config.json")
        self.config = file_io.read_json_object(config) if os.path.isfile(config) else {}
        architectures = self.config.get("architectures") or [None]
        if not isinstance(architectures, list) or not isinstance(
            architectures[0], (str, _NONE_TYPE)
        ):
            raise UserError(f"{config}: 'architectures' is not a list of class names")
        self.architecture = architectures[0]
        self.stored_kind = names.HF_ARCHITECTURES.get(self.architecture)

    def get(self, name: str) -> np.ndarray:
        return self._tensors[name]

    def name_of(self, original: str) -> tuple[str, bool]:
        return names.hf_name(original, self.prefix)


def is_hf_directory(path: str) -> bool:
    return os.path.isdir(path) and (
        os.path.isfile(os.path.join(path, HF_WEIGHTS))
        or os.path.isfile(os.path.join(path, HF_INDEX))
    )


def _latest_checkpoint(directory: str) -> str | None:
    """The checkpoint its `checkpoint` state file names (None: no state file)."""
    try:
        return tf.train.latest_checkpoint(directory)
    except (UnicodeDecodeError, ValueError, tf.errors.OpError) as e:
        raise DamagedFileError(
            os.path.join(directory, "checkpoint"),
            None,
            f"the checkpoint state file cannot be read ({str(e).splitlines()[0]}): the "
            f"run's checkpoints are damaged; remove it to use the one *.index file",
        ) from None


def _directory_prefix(path: str) -> str:
    """The checkpoint prefix a directory stands for (see `resolve_checkpoint`)."""
    best = os.path.join(path, BEST_DIR)
    prefix = _latest_checkpoint(best) if os.path.isdir(best) else None
    if prefix is None:
        prefix = _latest_checkpoint(path)
    if prefix is None:
        indexes = sorted(glob.glob(os.path.join(path, "*.index")))
        if len(indexes) != 1:
            raise MissingFileError(
                f"no checkpoint found in directory {path} (expected config.json + "
                f"model.safetensors, a 'checkpoint' file, a best/ folder with one, or one "
                f"*.index file)"
            )
        prefix = indexes[0][: -len(".index")]
    return prefix


def side_dirs_of(prefix: str) -> list[str]:
    """The folders describing a checkpoint prefix: its own, and the run's output_dir
    when the prefix lies in the run's best/ folder."""
    directory = os.path.dirname(prefix) or "."
    dirs = [directory]
    if os.path.basename(os.path.normpath(directory)) == BEST_DIR:
        dirs.append(os.path.dirname(os.path.normpath(directory)) or ".")
    return dirs


def resolve_checkpoint(path: str) -> tuple[str, str]:
    """Returns (kind, path): kind 'hf', 'tf1' or 'tf2'; path a directory or prefix.

    A directory resolves, in this order, to: a Hugging Face directory (config.json +
    model.safetensors); the latest checkpoint of its `best/` sub-folder (a run's
    output_dir that kept its best model: the one its evaluation and predictions came
    from); the latest checkpoint its `checkpoint` file names; its one `*.index` file.
    A prefix is taken as is. TF1 and TF2 are told apart by the variable names.
    """
    if not path:
        raise UserError("no checkpoint path given")
    if is_hf_directory(path):
        return "hf", path
    if os.path.isdir(path):
        if os.path.isfile(os.path.join(path, "pytorch_model.bin")):
            raise UserError(
                f"{path} holds only pytorch_model.bin; reading it needs PyTorch. "
                f"Save the model as model.safetensors first."
            )
        path = _directory_prefix(path)
    if not os.path.isfile(path + ".index"):
        raise MissingFileError(f"checkpoint not found: {path} (no {path}.index)")
    try:
        variables = tf.train.list_variables(path)
    except (tf.errors.OpError, IndexError, ValueError) as e:
        raise _damaged_checkpoint(path, None, e) from None
    if any(name.startswith(("bert/", "cls/")) for name, _ in variables):
        return "tf1", path
    return "tf2", path


def open_checkpoint(
    path: str,
    resolved: tuple[str, str] | None = None,
    model_info: tuple[str | None, dict] | None = None,
):
    """A reader of the checkpoint at `path` (see the module docstring). `resolved`
    (`resolve_checkpoint(path)`) and `model_info` ((path, contents) of the
    model_info.json beside it) are passed when the caller has them already."""
    kind, resolved = resolved or resolve_checkpoint(path)
    if kind == "hf":
        return _HFReader(resolved)
    side_dirs = side_dirs_of(resolved)
    reader = _TF1Reader if kind == "tf1" else _TF2Reader
    return reader(resolved, side_dirs, model_info)


def checkpoint_side_dirs(path: str) -> list[str]:
    """The folders describing the checkpoint at `path`, without reading it: the
    directory given (and, when it holds a run's best/ model, that folder too), or
    those of a prefix."""
    if os.path.isdir(path):
        best = os.path.join(path, BEST_DIR)
        return [path, best] if os.path.isdir(best) else [path]
    return side_dirs_of(path)
