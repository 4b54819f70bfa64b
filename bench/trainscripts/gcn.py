"""Node classification with a graph convolutional network (Kipf & Welling, 2017): the symmetrically
normalised adjacency matrix with self-loops is a sparse tensor, each layer multiplies it with the
node features through ``torch.sparse.mm``; full-batch Adam with weight decay, log-softmax with
``nll_loss`` on the training nodes, accuracy on validation and test nodes in eval mode.

The graph is generated here: a stochastic block model (nodes link mostly within their class) with
sparse binary features whose probabilities depend on the class.

    python gcn.py [--epochs 40] [--nodes 600] [--eval-every 10]
"""

import argparse

import torch
import torch.nn.functional as F
from torch import nn


def block_model(nodes: int, classes: int, features: int, gen: torch.Generator):
    labels = torch.randint(0, classes, (nodes,), generator=gen)
    same = labels[:, None] == labels[None, :]
    chance = torch.where(same, torch.tensor(0.03), torch.tensor(0.002))
    links = torch.rand(nodes, nodes, generator=gen) < chance
    links = torch.triu(links, diagonal=1)
    links = links | links.t()
    word_odds = 0.01 + 0.1 * torch.rand(classes, features, generator=gen)
    words = (torch.rand(nodes, features, generator=gen) < word_odds[labels]).float()
    return links, words, labels


def normalised_adjacency(links: torch.Tensor) -> torch.Tensor:
    """D^-1/2 (A + I) D^-1/2 as a sparse COO tensor."""
    with_self = links.float() + torch.eye(links.shape[0])
    scale = with_self.sum(1).rsqrt()
    return (scale[:, None] * with_self * scale[None, :]).to_sparse()


class GraphConvolution(nn.Module):
    def __init__(self, inputs: int, outputs: int):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(inputs, outputs))
        self.bias = nn.Parameter(torch.zeros(outputs))
        nn.init.xavier_uniform_(self.weight)

    def forward(self, h: torch.Tensor, adjacency: torch.Tensor) -> torch.Tensor:
        return torch.sparse.mm(adjacency, h @ self.weight) + self.bias


class TwoLayerGCN(nn.Module):
    def __init__(self, inputs: int, hidden: int, classes: int, dropout: float = 0.5):
        super().__init__()
        self.first = GraphConvolution(inputs, hidden)
        self.second = GraphConvolution(hidden, classes)
        self.dropout = dropout

    def forward(self, words, adjacency):
        h = F.dropout(words, self.dropout, self.training)
        h = F.relu(self.first(h, adjacency))
        h = F.dropout(h, self.dropout, self.training)
        return F.log_softmax(self.second(h, adjacency), dim=1)


def accuracy(log_probs: torch.Tensor, labels: torch.Tensor) -> float:
    return (log_probs.argmax(1) == labels).float().mean().item()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=40)
    parser.add_argument("--nodes", type=int, default=600)
    parser.add_argument("--eval-every", type=int, default=10)
    args = parser.parse_args()

    gen = torch.Generator().manual_seed(31)
    torch.manual_seed(31)
    links, words, labels = block_model(args.nodes, 5, 120, gen)
    adjacency = normalised_adjacency(links)
    order = torch.randperm(args.nodes, generator=gen)
    half, three_quarters = args.nodes // 2, 3 * args.nodes // 4
    train_idx, val_idx, test_idx = order[:half], order[half:three_quarters], order[three_quarters:]

    gcn = TwoLayerGCN(words.shape[1], 32, 5)
    adam = torch.optim.Adam(gcn.parameters(), lr=0.01, weight_decay=5e-4)
    for epoch in range(1, args.epochs + 1):
        gcn.train()
        adam.zero_grad()
        out = gcn(words, adjacency)
        loss = F.nll_loss(out[train_idx], labels[train_idx])
        loss.backward()
        adam.step()
        if epoch % args.eval_every == 0:
            gcn.eval()
            with torch.no_grad():
                out = gcn(words, adjacency)
            print(f"epoch {epoch}: loss {loss.item():.3f}, train {accuracy(out[train_idx], labels[train_idx]):.1%}, "
                  f"val {accuracy(out[val_idx], labels[val_idx]):.1%}")
    gcn.eval()
    with torch.no_grad():
        print(f"test accuracy {accuracy(gcn(words, adjacency)[test_idx], labels[test_idx]):.1%}")


if __name__ == "__main__":
    main()
