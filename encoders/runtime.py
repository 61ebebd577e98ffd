"""What runs the frozen backbone's forward pass on a CPU.

`torch` is eager PyTorch, the default. `onnx` runs the same weights in ONNX
Runtime, and `onnx-int8` runs them with dynamically quantised int8 weights.
On a small CPU both are much faster for an encoder as small as MiniLM,
because the per-operator overhead of eager mode is a large share of its
time there. Only the frozen backbone moves: heads, adapters and the models
that the Cross-Thought and nugget encoders train keep running in torch.

The ONNX graph is exported once per set of backbone weights into a cache
directory (`$PROPDEX_CACHE`, else `~/.cache/propdex`), under the weights'
sha256 and the export recipe's number. It is written to a temporary name and renamed into place, so an
interrupted export leaves nothing behind that a later run would trust.
The graph returns every layer's states, so every encoder that reads
`hidden_states` gets the layers it asks for from one session.
"""
from __future__ import annotations

import logging
import os
import tempfile
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from . import RUNTIMES

if TYPE_CHECKING:
    from .backbone import Backbone

log = logging.getLogger(__name__)

_INPUTS = ("input_ids", "attention_mask", "token_type_ids")
ROWS = 8  # rows per ONNX Runtime call (float32)
# Bumped whenever export() would write a different graph, so caches made before are not reused.
RECIPE = 2


def check_runtime(runtime: str, device: torch.device) -> str:
    if runtime not in RUNTIMES:
        raise ValueError(f"unknown runtime {runtime!r}; choose from {', '.join(RUNTIMES)}")
    if runtime != "torch" and device.type != "cpu":
        raise ValueError(f"runtime {runtime!r} runs on the CPU; on {device} use the default torch runtime")
    if runtime != "torch":
        try:
            import onnxruntime  # noqa: F401
        except ImportError:
            raise ValueError(f"runtime {runtime!r} needs onnxruntime: pip install 'propdex[onnx]'") from None
    return runtime


def cache_dir() -> Path:
    return Path(os.environ.get("PROPDEX_CACHE") or Path.home() / ".cache" / "propdex")


class _AllLayers(torch.nn.Module):
    """The backbone, returning every layer's states stacked: (layers + 1, batch, length, dim)."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, token_type_ids: torch.Tensor) -> torch.Tensor:
        out = self.model(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids, output_hidden_states=True)
        return torch.stack(out.hidden_states, 0)


def _atomic_save(write, target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=target.name, suffix=".part")
    os.close(fd)
    try:
        write(tmp)
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def export(backbone: "Backbone", int8: bool) -> Path:
    """The backbone's ONNX graph (int8 weights when `int8`), made on first use.

    A fresh copy of the weights with plain (eager) attention is traced, so
    the loaded model is never touched and ONNX Runtime's BERT optimizer can
    fuse each layer's attention, its layer norms and its GELU; int8 is
    dynamic quantisation of that fused graph, per output channel (per
    tensor costs far more accuracy on MiniLM), the first layer's matrix
    products kept in float32."""
    folder = cache_dir() / "onnx" / f"{backbone.weights_hash[:16]}-r{RECIPE}"
    fp32, quantised = folder / "model.onnx", folder / "model.int8.onnx"
    if not fp32.is_file():
        from transformers import AutoModel

        log.info("exporting %s to ONNX in %s (once per set of weights)", backbone.name, folder)
        model = AutoModel.from_pretrained(backbone.source, local_files_only=True, attn_implementation="eager")
        example = backbone.tokenizer(["an example", "to trace the graph with"], return_tensors="pt", padding=True)
        args = tuple(example[k] if k in example else torch.zeros_like(example["input_ids"]) for k in _INPUTS)
        axes = {k: {0: "batch", 1: "length"} for k in _INPUTS} | {"states": {1: "batch", 2: "length"}}

        def write(tmp: str) -> None:
            # The tracer warns about the Python branches it freezes; with the
            # axes above they do not depend on the shapes (tests compare).
            with torch.inference_mode(False), torch.no_grad(), warnings.catch_warnings():
                warnings.simplefilter("ignore")
                torch.onnx.export(_AllLayers(model).eval(), args, tmp, input_names=list(_INPUTS), output_names=["states"],
                                  dynamic_axes=axes, opset_version=17, dynamo=False)
            _fuse(tmp, model.config)

        _atomic_save(write, fp32)
    if int8 and not quantised.is_file():
        from onnx import TensorProto
        from onnxruntime.quantization import QuantType, quantize_dynamic

        def write_int8(tmp: str) -> None:
            import onnx

            # The first layer's products stay float32: they move the vectors
            # most when quantised (cosine to torch, min over 256 HotpotQA
            # passages: 0.983 all int8, 0.991 with these kept) for ~5% of the time.
            first = [n.name for n in onnx.load(str(fp32)).graph.node if n.op_type == "MatMul" and "/layer.0/" in n.name]
            logging.disable(logging.WARNING)  # its advice to pre-process, on the root logger: the graph is fused already
            try:
                quantize_dynamic(str(fp32), tmp, weight_type=QuantType.QInt8, per_channel=True, nodes_to_exclude=first,
                                 extra_options={"DefaultTensorType": TensorProto.FLOAT})
            finally:
                logging.disable(logging.NOTSET)

        _atomic_save(write_int8, quantised)
    return quantised if int8 else fp32


def _fuse(path: str, config: Any) -> None:
    """Fuse a BERT-shaped graph in place; other architectures run unfused."""
    from onnxruntime.transformers.optimizer import optimize_model

    try:
        model = optimize_model(path, model_type="bert", num_heads=config.num_attention_heads, hidden_size=config.hidden_size, opt_level=1)
    except Exception as e:  # an architecture the optimizer does not know: correct, just slower
        log.warning("ONNX Runtime could not fuse this backbone's graph (%s); running it unfused", e)
        return
    model.save_model_to_file(path)


class OnnxSession:
    """An ONNX Runtime session over the backbone's graph, with as many threads as torch has."""

    def __init__(self, backbone: "Backbone", int8: bool) -> None:
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.intra_op_num_threads = torch.get_num_threads()
        options.inter_op_num_threads = 1
        # Encoding alternates model calls with tokenising and pooling in
        # Python: idle threads that spin would take the cores those need.
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        self.path = export(backbone, int8)
        self.rows = 1 if int8 else ROWS
        self.session = ort.InferenceSession(str(self.path), options, providers=["CPUExecutionProvider"])

    def states(self, inputs: dict[str, Any], layers: list[int]) -> torch.Tensor:
        """(batch, length, dim * len(layers)): the layers' states side by side.

        Rows go through in chunks, each cut to its own longest row: on a
        CPU small batches run fastest (`propdex bench --sections runtimes`),
        and cut padding is work not done. int8 goes one row at a time:
        dynamic quantisation scales activations per call, so a larger call
        would make a text's vector depend on the texts batched with it.
        Padded positions come back as zeros."""
        feed = {k: np.ascontiguousarray(inputs[k].cpu().numpy(), dtype=np.int64) if k in inputs
                else np.zeros(tuple(inputs["input_ids"].shape), np.int64) for k in _INPUTS}
        batch, length = feed["input_ids"].shape
        lengths = feed["attention_mask"].sum(1)
        out = None
        for start in range(0, batch, self.rows):
            rows = slice(start, start + self.rows)
            n = max(int(lengths[rows].max()), 1)
            every = self.session.run(None, {k: v[rows, :n] for k, v in feed.items()})[0]
            part = np.concatenate([every[i] for i in layers], axis=-1)
            if out is None:
                out = np.zeros((batch, length, part.shape[-1]), np.float32)
            out[rows, :n] = part
        return torch.from_numpy(out)
