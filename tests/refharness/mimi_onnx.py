"""Mimi as speech-core's ONNX bundles hold it: mimi_encoder.onnx (pcm float [1, 1, samples] -> codes int64
[1, codebooks, frames]) and mimi_decoder.onnx (codes -> pcm), torch.onnx.export of the reference MimiModel's own
non-streaming encode and decode, in float32.

    mimi_onnx.py CASE OUT [--decoder-codebooks N]
    mimi_onnx.py --fuzz-seed FILE


CASE is a mimi-* golden case (config.json with the reference's seanet / quantizer / transformer sections and
model.safetensors, float32 with the released key names); OUT receives both graphs. The encoder is exported with
the case's num_codebooks and opset 17 (LayerNormalization nodes, every weight inline); the decoder with N
codebooks (default: all the quantizer's levels, so it holds more levels than the codec uses) and opset 14 (layer
norms decomposed into ReduceMean / Sub / Pow / Sqrt / Div / Mul / Add), its weights over 64 bytes in
mimi_decoder.onnx.data. The weights are the case's, unchanged, so the case's golden outputs stand.

torch.cdist does not export on torch 1.13: the nearest-codeword search is written as |x|^2 - 2 x.e + |e|^2,
which picks the same codes (the graph's arithmetic is not what the loader reads; its weights are).

--fuzz-seed FILE writes FILE (tests/fuzz/corpus/fuzz_onnx/codec) and FILE-unfolded (exported without constant
folding, so weights reach their MatMuls through Transpose nodes, and its decoder's codebooks edited into
embedding_sum / clamp(cluster_usage) as initializers): selector byte 3, then the u32 little-endian length of a
micro codec's config.json and its text, the u32 length of its encoder graph and the graph, then its decoder graph
(every tensor inline; random weights)."""
import argparse
import json
import os
import struct
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.environ.get("PP_REFHARNESS", os.path.join(HERE, "..", "..", "..", "shared", "refharness")))
import common  # noqa: E402,F401  (the reference and the shims on the path)
import numpy as np  # noqa: E402
import onnx  # noqa: E402
import torch  # noqa: E402
from gen_mimi import build, tiny_kwargs  # noqa: E402
from moshi.quantization import core_vq  # noqa: E402
from onnx import helper, numpy_helper  # noqa: E402
from safetensors.torch import load_file  # noqa: E402


def nearest(self, x):
    e = self.embedding
    d = (x * x).sum(-1, keepdim=True) - 2 * x @ e.t() + (e * e).sum(-1)[None]
    return d.argmin(dim=-1)


core_vq.EuclideanCodebook._quantize = nearest


class Half(torch.nn.Module):
    """The codec's encode or decode as a module to export (method: "encode" or "decode")."""

    def __init__(self, mimi, method):
        super().__init__()
        self.mimi = mimi
        self.method = method

    def forward(self, x):
        return getattr(self.mimi, self.method)(x)


def export(mimi, cfg, out, decoder_codebooks, fold=True):
    """Both graphs into folder out, every tensor inline (fold False: constant folding off, so weights reach their
    MatMuls through Transpose nodes and codebooks through Div / Clip / Unsqueeze)."""
    pcm = torch.randn(1, 1, 4 * cfg["frame_size"]) * 0.1
    with torch.no_grad():
        mimi.set_num_codebooks(cfg["num_codebooks"])
        torch.onnx.export(Half(mimi, "encode"), (pcm,), os.path.join(out, "mimi_encoder.onnx"), opset_version=17,
                          input_names=["pcm"], output_names=["codes"], do_constant_folding=fold,
                          dynamic_axes={"pcm": {2: "samples"}, "codes": {2: "frames"}})
        mimi.set_num_codebooks(decoder_codebooks or cfg["quantizer"]["n_q"])
        codes = mimi.encode(pcm)
        torch.onnx.export(Half(mimi, "decode"), (codes,), os.path.join(out, "mimi_decoder.onnx"), opset_version=14,
                          input_names=["codes"], output_names=["pcm"], do_constant_folding=fold,
                          dynamic_axes={"codes": {2: "frames"}, "pcm": {2: "samples"}})


def codebooks_as_div(path, mimi):
    """Rewrites the decoder at path so that each codebook Gather reads embedding_sum / clamp(cluster_usage) computed
    in the graph from two initializers, as an exporter that keeps the buffers writes it (torch folds the table)."""
    m = onnx.load(path)
    g = m.graph
    tables = {n.output[0] for n in g.node if n.op_type == "Constant" and len(n.attribute[0].t.dims) == 2}
    levels = [mimi.quantizer.rvq_first.vq.layers[0]] + list(mimi.quantizer.rvq_rest.vq.layers)
    nodes, k = [], 0
    for n in g.node:
        if n.op_type == "Gather" and n.input[0] in tables:
            cb = levels[k]._codebook
            names = [f"codebook{k}_{s}" for s in ("sum", "usage", "eps", "axes", "clipped", "column", "rows")]
            g.initializer.extend([numpy_helper.from_array(cb.embedding_sum.numpy(), names[0]),
                                  numpy_helper.from_array(cb.cluster_usage.numpy(), names[1]),
                                  numpy_helper.from_array(np.array(cb.epsilon, dtype=np.float32), names[2]),
                                  numpy_helper.from_array(np.array([1], dtype=np.int64), names[3])])
            nodes += [helper.make_node("Clip", [names[1], names[2]], [names[4]]),
                      helper.make_node("Unsqueeze", [names[4], names[3]], [names[5]]),
                      helper.make_node("Div", [names[0], names[5]], [names[6]])]
            n.input[0] = names[6]
            k += 1
        nodes.append(n)
    del g.node[:]
    g.node.extend(nodes)
    onnx.save(m, path)


def fuzz_seed(path):
    torch.manual_seed(5)
    cfg = {"seanet": {"n_filters": 2, "dimension": 8, "ratios": [8, 6, 5, 4]},
           "quantizer": {"dimension": 4, "n_q": 3, "bins": 8, "input_dimension": 8, "output_dimension": 8},
           "transformer": {"d_model": 8, "num_heads": 2, "num_layers": 1, "context": 3, "dim_feedforward": 16,
                           "input_dimension": 8, "output_dimensions": [8]},
           "num_codebooks": 2, "frame_size": 1920}
    seanet, quant, tr = tiny_kwargs(2, 8, 1, 3, 4, 3)
    mimi = build(seanet, dict(quant, bins=8), dict(tr, dim_feedforward=16))
    with torch.no_grad():
        for rvq in (mimi.quantizer.rvq_first, mimi.quantizer.rvq_rest):
            for layer in rvq.vq.layers:
                layer._codebook.embedding_sum.normal_()
                layer._codebook.cluster_usage.uniform_(0.5, 1.5)
    text = json.dumps(cfg).encode()
    for fold, name in ((True, path), (False, path + "-unfolded")):
        with tempfile.TemporaryDirectory() as tmp:
            export(mimi, cfg, tmp, 0, fold)
            if not fold:
                codebooks_as_div(os.path.join(tmp, "mimi_decoder.onnx"), mimi)
            enc, dec = (open(os.path.join(tmp, f), "rb").read() for f in ("mimi_encoder.onnx", "mimi_decoder.onnx"))
        with open(name, "wb") as f:
            f.write(b"\3" + struct.pack("<I", len(text)) + text + struct.pack("<I", len(enc)) + enc + dec)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("case", nargs="?")
    ap.add_argument("out", nargs="?")
    ap.add_argument("--decoder-codebooks", type=int, default=0)
    ap.add_argument("--fuzz-seed")
    a = ap.parse_args()
    if a.fuzz_seed:
        return fuzz_seed(a.fuzz_seed)
    cfg = json.load(open(os.path.join(a.case, "config.json")))
    mimi = build(cfg["seanet"], cfg["quantizer"], cfg["transformer"])
    mimi.load_state_dict(load_file(os.path.join(a.case, "model.safetensors")), strict=False)
    os.makedirs(a.out, exist_ok=True)
    export(mimi, cfg, a.out, a.decoder_codebooks)
    path = os.path.join(a.out, "mimi_decoder.onnx")
    onnx.save_model(onnx.load(path), path, save_as_external_data=True, all_tensors_to_one_file=True,
                    location="mimi_decoder.onnx.data", size_threshold=64)


if __name__ == "__main__":
    main()
