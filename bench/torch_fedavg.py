#!/usr/bin/python3
"""PyTorch reference implementation of PFLlib's FedAvg (serveravg.py +
clientavg.py + clientbase.py), the accuracy reference for pfl.

Input is a partition written by `pfl partition ... --save FILE`:
  {"dataset":"fmnist","partition":"pat:2","clients":20,"seed":1,
   "train":[[idx,...],...],"test":[[idx,...],...]}
where train[i]/test[i] are client i's sample indices into the merged dataset
(all train-file samples, then all test-file samples).

Procedure, as PFLlib's FedAvg server loop:
  global model initialized after torch.manual_seed(seed)
  for i in 0..R:                        (R+1 iterations; round 0 = the initial model)
      select clients (join 1: all; else a random subset of int(join*N), PFLlib's
          num_join_clients = int(num_clients * join_ratio))
      send the global model to every client
      if i % eval_every == 0: evaluate (every client's model = the global model):
          local_acc      = sum correct / sum test samples over all clients
          local_acc_mean = unweighted mean of per-client test accuracies
          local_acc_std  = their population std (np.std, as PFLlib)
          train_loss     = PFLlib's train_metrics: each client's model on its own
                           train loader (shuffled, drop_last as in training),
                           loss summed over samples / sum of samples seen
      if i == R: stop (PFLlib would also train once more, but nothing after
          that is ever evaluated, so it is skipped here)
      each selected client, sequentially: copy of the global model, E epochs of
          SGD(lr, momentum 0) + CrossEntropyLoss over its train split in
          shuffled batches of B; PFLlib's train loader has drop_last=True, so the
          last incomplete batch of every epoch is dropped (--no-drop-last to keep
          it). A fresh SGD per client per round is the same as PFLlib's persistent
          one, since momentum 0 / no weight decay keeps no state.
      aggregate: global = sum_c (n_c / sum n) * model_c over the selected clients,
          n_c = the client's number of train samples (PFLlib's
          receive_models/aggregate_parameters, client_drop_rate 0).

Implementation notes (speed without changing the semantics):
  * the dataset is preloaded once as a normalized float32 tensor
    ((p/255 - 0.5)/0.5, PFLlib's Normalize(0.5, 0.5)); each client's train
    split is gathered once, each epoch's shuffled copy in one go;
  * one working model is reused for the clients in turn (clients run
    sequentially, as PFLlib does);
  * since every client holds the same global model at evaluation time, each
    sample is evaluated once in large no-grad batches and the per-sample
    correct/loss are summed per client. This equals PFLlib's per-client batch-10
    loops up to float summation order.
  * aggregation runs over the selected clients in increasing id order (PFLlib
    runs them in np.random.choice order, which only changes float summation
    order); shuffles use torch.randperm with a generator seeded from --seed,
    client selection numpy's RandomState(--seed). The random streams cannot
    match pfl's, so compare curves statistically, not bit for bit.

Writes one JSON line per round to --out:
  {"round":i,"local_acc":..,"local_acc_mean":..,"local_acc_std":..,
   "global_acc":.. (= local_acc for FedAvg),"train_loss":..,"seconds":..,...}
(metric fields are null in rounds that are not evaluated) and a progress line
per round to stderr.
"""

import argparse
import json
import os
import sys
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common_torch as ct  # noqa: E402


def parse_args():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--partition-file", required=True)
    p.add_argument("--data-dir", default=ct.default_data_dir(), help="default: $PFL_DATA or ./data")
    p.add_argument("--data", default=None, choices=ct.DATASETS, help="override the partition file's dataset")
    # parameters only are averaged here: no models with BatchNorm state
    p.add_argument("--model", default="cnn", choices=ct.MODELS)
    p.add_argument("--device", default="cpu",
                   help="torch device, cpu or cuda (clients still train one after another, as PFLlib's do)")
    p.add_argument("--local-steps", type=int, default=0,
                   help="an epoch is at most K batches (0: a pass), as pfl's --local-steps K; for timing")
    p.add_argument("--rounds", type=int, default=30)
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--batch", type=int, default=10)
    p.add_argument("--lr", type=float, default=0.005)
    p.add_argument("--join", type=float, default=1.0)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--eval-every", type=int, default=1)
    p.add_argument("--threads", type=int, default=2, help="torch threads (default 2)")
    p.add_argument("--blas-threads", default="1", help='OpenBLAS threads, a number or "match" (default 1)')
    p.add_argument("--drop-last", dest="drop_last", action="store_true", default=True,
                   help="drop each epoch's last incomplete batch (default, as PFLlib's train loader)")
    p.add_argument("--no-drop-last", dest="drop_last", action="store_false")
    p.add_argument("--eval-batch", type=int, default=100, help="batch size of the no-grad evaluation passes")
    p.add_argument("--out", default=None, help="JSONL output file")
    return p.parse_args()


def main():
    a = parse_args()
    if a.rounds < 0 or a.epochs < 1 or a.batch < 1 or a.eval_every < 1 or not (0 < a.join <= 1):
        sys.exit("bad --rounds/--epochs/--batch/--eval-every/--join")
    blas = ct.set_threads(a.threads, a.blas_threads)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:
        pass

    with open(a.partition_file) as f:
        part = json.load(f)
    dataset = a.data or part.get("dataset")
    if dataset not in ct.DATASETS:
        sys.exit("unknown dataset %r (use --data)" % dataset)
    t_load = time.perf_counter()
    X, Y = ct.load_dataset(dataset, a.data_dir)
    dev = torch.device(a.device)
    X, Y = X.to(dev), Y.to(dev)   # the whole dataset on the device once
    total = len(X)
    train_lists, test_lists = part["train"], part["test"]
    N = len(train_lists)
    if len(test_lists) != N:
        sys.exit("partition: %d train lists but %d test lists" % (N, len(test_lists)))
    for lst in train_lists + test_lists:
        if lst and (min(lst) < 0 or max(lst) >= total):
            sys.exit("partition: index out of range [0, %d)" % total)

    train_idx = [torch.tensor(l, dtype=torch.long, device=dev) for l in train_lists]
    test_idx = [torch.tensor(l, dtype=torch.long, device=dev) for l in test_lists]
    Xtr = [X[i].contiguous() for i in train_idx]   # each client's train split, gathered once
    Ytr = [Y[i].contiguous() for i in train_idx]
    n_train = np.array([len(l) for l in train_lists], dtype=np.int64)
    n_test = np.array([len(l) for l in test_lists], dtype=np.int64)
    # all clients' test samples, evaluated in one pass; owner[k] = client of sample k
    test_all = torch.cat(test_idx) if N else torch.zeros(0, dtype=torch.long, device=dev)
    test_owner = torch.from_numpy(np.repeat(np.arange(N), n_test))
    print("[torch-fedavg] %s %s: %d clients, %d train / %d test samples, %d merged; load %.1fs; "
          "torch %s on %s, %d threads, OpenBLAS threads %s; load average %.2f" %
          (dataset, part.get("partition", "?"), N, n_train.sum(), n_test.sum(), total,
           time.perf_counter() - t_load, torch.__version__,
           torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu", a.threads, blas, os.getloadavg()[0]), file=sys.stderr, flush=True)

    torch.manual_seed(a.seed)
    model = ct.build_model(a.model, dataset).to(dev)     # the global model's initialization

    def sync():  # a GPU works asynchronously: timings end when its work has
        if dev.type == "cuda":
            torch.cuda.synchronize()
    global_params = [p.detach().clone() for p in model.parameters()]
    params = list(model.parameters())
    opt = torch.optim.SGD(params, lr=a.lr, momentum=0.0)
    loss_fn = nn.CrossEntropyLoss()
    sel_rng = np.random.RandomState(a.seed)
    gen = torch.Generator().manual_seed(a.seed)
    num_join = max(1, int(N * a.join + 1e-9))  # PFLlib: int(num_clients * join_ratio)
    B = a.batch

    def load_global():
        with torch.no_grad():
            for p, g in zip(params, global_params):
                p.copy_(g)

    def per_sample(idx):
        """(correct [n] bool, loss [n] float64) of the current model on X[idx]."""
        corr, losses = [], []
        with torch.no_grad():
            for s in range(0, len(idx), a.eval_batch):
                j = idx[s:s + a.eval_batch]
                out = model(X[j])
                y = Y[j]
                corr.append(out.argmax(dim=1) == y)
                losses.append(F.cross_entropy(out, y, reduction="none").double())
        if not corr:
            return torch.zeros(0, dtype=torch.bool), torch.zeros(0, dtype=torch.float64)
        return torch.cat(corr).cpu(), torch.cat(losses).cpu()

    def evaluate():
        model.eval()
        load_global()
        correct, _ = per_sample(test_all)
        c_correct = np.bincount(test_owner.numpy(), weights=correct.double().numpy(), minlength=N)
        # PFLlib's train_metrics: the client's (shuffled, drop_last) train loader
        tr_sel = []
        for c in range(N):
            n = int(n_train[c])
            keep = (n // B) * B if a.drop_last else n
            if keep == 0:
                continue
            perm = torch.randperm(n, generator=gen)[:keep] if keep < n else torch.arange(n)
            tr_sel.append(train_idx[c][perm.to(dev)])
        if tr_sel:
            _, tr_loss = per_sample(torch.cat(tr_sel))
            train_loss = float(tr_loss.sum()) / len(tr_loss)
        else:
            train_loss = float("nan")
        has = n_test > 0
        accs = c_correct[has] / n_test[has]
        acc = float(c_correct.sum() / max(1, n_test.sum()))
        return {"local_acc": acc, "local_acc_mean": float(np.mean(accs)) if len(accs) else None,
                "local_acc_std": float(np.std(accs)) if len(accs) else None, "global_acc": acc,
                "train_loss": train_loss}

    def train_client(c):
        """E epochs of SGD on client c from the global model; returns the samples seen."""
        seen = 0
        load_global()
        model.train()
        n = int(n_train[c])
        for _ in range(a.epochs):
            perm = torch.randperm(n, generator=gen).to(dev)
            xp, yp = Xtr[c][perm], Ytr[c][perm]
            stop = (n // B) * B if a.drop_last else n
            if a.local_steps > 0:
                stop = min(stop, a.local_steps * B)
            for s in range(0, stop, B):
                out = model(xp[s:s + B])
                loss = loss_fn(out, yp[s:s + B])
                opt.zero_grad()
                loss.backward()
                opt.step()
                seen += len(out)
        return seen

    out_f = open(a.out, "w") if a.out else None
    run_t0 = time.perf_counter()
    for i in range(a.rounds + 1):
        t0 = time.perf_counter()
        if num_join >= N:
            selected = list(range(N))
        else:
            selected = sorted(int(c) for c in sel_rng.choice(N, num_join, replace=False))
        metrics = None
        if i % a.eval_every == 0:
            metrics = evaluate()
        sync()
        t_eval = time.perf_counter() - t0
        if i < a.rounds:
            t1 = time.perf_counter()
            tot = float(n_train[selected].sum())
            agg = [torch.zeros_like(g) for g in global_params]
            trained = 0
            for c in selected:
                trained += train_client(c)
                w = float(n_train[c]) / tot
                with torch.no_grad():
                    for acc_p, p in zip(agg, params):
                        acc_p += p.data.clone() * w
            global_params = agg
            sync()
            t_train = time.perf_counter() - t1
        else:
            t_train, trained = 0.0, 0
        secs = time.perf_counter() - t0
        rec = {"round": i}
        keys = ("local_acc", "local_acc_mean", "local_acc_std", "global_acc", "train_loss")
        rec.update({k: (metrics[k] if metrics else None) for k in keys})
        rec.update({"seconds": round(secs, 4), "eval_seconds": round(t_eval, 4), "train_seconds": round(t_train, 4),
                    "selected": len(selected) if i < a.rounds else 0, "impl": "torch", "algo": "fedavg",
                    "device": a.device, "train_samples": trained})
        if out_f:
            out_f.write(json.dumps(rec) + "\n")
            out_f.flush()
        if metrics:
            print("[torch-fedavg] round %3d  acc %.4f (mean %.4f std %.4f)  loss %.4f  eval %.1fs  train %.1fs  %.1fs" %
                  (i, metrics["local_acc"], rec["local_acc_mean"] or 0, rec["local_acc_std"] or 0,
                   metrics["train_loss"], t_eval, t_train, secs), file=sys.stderr, flush=True)
        else:
            print("[torch-fedavg] round %3d  train %.1fs  %.1fs" % (i, t_train, secs), file=sys.stderr, flush=True)
    if out_f:
        out_f.close()
    print("[torch-fedavg] done: %d rounds in %.1fs" % (a.rounds, time.perf_counter() - run_t0),
          file=sys.stderr, flush=True)


if __name__ == "__main__":
    main()
