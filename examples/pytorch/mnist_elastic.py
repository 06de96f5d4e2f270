"""examples/pytorch/mnist.py as an elastic job, in the structure of
Horovod's examples/elastic/pytorch/pytorch_mnist_elastic.py: the training
loop runs under hvd.elastic.run with a TorchState (model, optimizer, epoch,
batch) committed every --batches-per-commit batches; when a worker is lost
the others restore the last commit, re-form (new ranks and size, same
processes), re-partition the data for the new world in a reset callback,
scale the learning rate by the new size, and go on:

    hkrun -np 4 --min-np 2 python3 examples/pytorch/mnist_elastic.py

--kill-rank R --kill-batch B makes the worker started as rank R kill
itself (SIGKILL) at batch B of the first epoch, to see a loss happen.
Unlike Horovod's example there is no ElasticSampler: the reset callback
makes a DistributedSampler for the new world, and an epoch resumed after a
reset skips the batches its commit had done. docs/elastic.md says what
works.
"""

import os
import signal
import time

import torch
import torch.nn.functional as F
import torch.optim as optim
import torch.utils.data.distributed

import hk.torch as hvd
from mnist import Net, fashion_mnist, parser

parser.add_argument("--batches-per-commit", type=int, default=20,
                    help="commit the state every N batches (default: 20)")
parser.add_argument("--kill-rank", type=int, default=-1,
                    help="the worker started as this rank kills itself")
parser.add_argument("--kill-batch", type=int, default=10,
                    help="... at this batch of the first epoch")


def make_loader():
    """The training data partitioned for the current world."""
    global train_sampler, train_loader
    train_sampler = torch.utils.data.distributed.DistributedSampler(
        train_dataset, num_replicas=hvd.size(), rank=hvd.rank())
    train_loader = torch.utils.data.DataLoader(
        train_dataset, batch_size=args.batch_size, sampler=train_sampler)


def on_reset():
    make_loader()
    for group in optimizer.param_groups:
        group["lr"] = args.lr * hvd.size()
    print("re-formed: rank {} of {} (started as rank {})".format(
        hvd.rank(), hvd.size(), first_rank), flush=True)


@hvd.elastic.run
def train(state):
    for state.epoch in range(state.epoch, args.epochs + 1):
        model.train()
        train_sampler.set_epoch(state.epoch)
        for batch_idx, (data, target) in enumerate(train_loader):
            if batch_idx < state.batch:
                continue  # done before the last commit
            if (first_rank == args.kill_rank and state.epoch == 1 and
                    batch_idx == args.kill_batch):
                print("rank {} kills itself at batch {}".format(
                    first_rank, batch_idx), flush=True)
                os.kill(os.getpid(), signal.SIGKILL)
            state.batch = batch_idx
            if batch_idx % args.batches_per_commit == 0:
                state.commit()
            optimizer.zero_grad()
            loss = F.nll_loss(model(data), target)
            loss.backward()
            optimizer.step()
            if batch_idx % args.log_interval == 0 and hvd.rank() == 0:
                print("Train Epoch: {} [{}/{}]\tLoss: {:.6f} (np {})".format(
                    state.epoch, batch_idx * len(data), len(train_sampler),
                    loss.item(), hvd.size()), flush=True)
        state.batch = 0
        state.commit()
    return test()


def test():
    model.eval()
    test_sampler = torch.utils.data.distributed.DistributedSampler(
        test_dataset, num_replicas=hvd.size(), rank=hvd.rank())
    loader = torch.utils.data.DataLoader(
        test_dataset, batch_size=args.test_batch_size, sampler=test_sampler)
    correct = 0.
    with torch.no_grad():
        for data, target in loader:
            pred = model(data).max(1, keepdim=True)[1]
            correct += pred.eq(target.view_as(pred)).float().sum().item()
    acc = hvd.allreduce(torch.tensor(correct / len(test_sampler)),
                        name="avg_accuracy").item()
    return acc


if __name__ == "__main__":
    args = parser.parse_args()
    hvd.init()
    first_rank = hvd.rank()
    torch.manual_seed(args.seed)
    torch.set_num_threads(1)
    train_dataset = fashion_mnist(args.data_dir, True, args.train_limit)
    test_dataset = fashion_mnist(args.data_dir, False, args.test_limit)
    make_loader()
    model = Net()
    optimizer = hvd.DistributedOptimizer(
        optim.SGD(model.parameters(), lr=args.lr * hvd.size(),
                  momentum=args.momentum),
        named_parameters=model.named_parameters())
    state = hvd.elastic.TorchState(model=model, optimizer=optimizer,
                                   epoch=1, batch=0)
    state.register_reset_callbacks([on_reset])
    start = time.time()
    acc = train(state)
    if hvd.rank() == 0:
        print("final test accuracy {:.4f} after {} epochs, {:.1f} s, np {}"
              .format(acc, args.epochs, time.time() - start, hvd.size()),
              flush=True)
