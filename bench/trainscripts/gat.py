"""Node classification with a graph attention network (Velickovic et al., 2018): each head scores
every edge with a learned vector over the two endpoint projections, a LeakyReLU, a softmax over each
node's neighbours (non-edges masked with -inf) and dropout on the attention; hidden heads are
concatenated, the output heads averaged. Full-batch Adam with weight decay.

The graph is generated here (class-assortative random links, noisy class-dependent features).

    python gat.py [--epochs 20] [--nodes 400] [--heads 4] [--eval-every 10]
"""

import argparse

import torch
import torch.nn.functional as F
from torch import nn


def assortative_graph(nodes: int, classes: int, dims: int, gen: torch.Generator):
    labels = torch.randint(0, classes, (nodes,), generator=gen)
    p = torch.where(labels[:, None] == labels[None, :], torch.tensor(0.04), torch.tensor(0.003))
    upper = torch.triu(torch.rand(nodes, nodes, generator=gen) < p, diagonal=1)
    edges = upper | upper.t() | torch.eye(nodes, dtype=torch.bool)
    centres = torch.randn(classes, dims, generator=gen)
    features = centres[labels] + 1.5 * torch.randn(nodes, dims, generator=gen)
    return edges, features, labels


class AttentionHeads(nn.Module):
    """``heads`` attention heads of ``width`` outputs each over a dense boolean adjacency."""

    def __init__(self, inputs: int, width: int, heads: int, merge: str, dropout: float):
        super().__init__()
        self.project = nn.Linear(inputs, heads * width, bias=False)
        self.score_source = nn.Parameter(torch.empty(heads, width))
        self.score_target = nn.Parameter(torch.empty(heads, width))
        nn.init.xavier_uniform_(self.score_source)
        nn.init.xavier_uniform_(self.score_target)
        self.heads, self.width, self.merge, self.dropout = heads, width, merge, dropout

    def forward(self, x: torch.Tensor, edges: torch.Tensor) -> torch.Tensor:
        n = x.shape[0]
        h = self.project(x).view(n, self.heads, self.width)                      # (n, H, W)
        src = (h * self.score_source).sum(-1)                                    # (n, H)
        dst = (h * self.score_target).sum(-1)
        logits = F.leaky_relu(src.t()[:, :, None] + dst.t()[:, None, :], 0.2)    # (H, n, n)
        logits = logits.masked_fill(~edges, float("-inf"))
        weights = F.dropout(torch.softmax(logits, dim=-1), self.dropout, self.training)
        mixed = torch.einsum("hij,jhw->ihw", weights, h)                          # (n, H, W)
        return mixed.reshape(n, -1) if self.merge == "concat" else mixed.mean(1)


class GraphAttentionNet(nn.Module):
    def __init__(self, inputs: int, hidden: int, classes: int, heads: int, dropout: float = 0.4):
        super().__init__()
        self.hidden = AttentionHeads(inputs, hidden, heads, "concat", dropout)
        self.output = AttentionHeads(hidden * heads, classes, 1, "mean", dropout)
        self.dropout = dropout

    def forward(self, x, edges):
        x = F.dropout(x, self.dropout, self.training)
        x = F.elu(self.hidden(x, edges))
        x = F.dropout(x, self.dropout, self.training)
        return self.output(x, edges)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--nodes", type=int, default=400)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--eval-every", type=int, default=10)
    args = parser.parse_args()

    gen = torch.Generator().manual_seed(37)
    torch.manual_seed(37)
    edges, features, labels = assortative_graph(args.nodes, 4, 32, gen)
    order = torch.randperm(args.nodes, generator=gen)
    train_idx, test_idx = order[: args.nodes // 2], order[args.nodes // 2:]

    net = GraphAttentionNet(features.shape[1], 8, 4, args.heads)
    adam = torch.optim.Adam(net.parameters(), lr=5e-3, weight_decay=5e-4)
    for epoch in range(1, args.epochs + 1):
        net.train()
        adam.zero_grad()
        loss = F.cross_entropy(net(features, edges)[train_idx], labels[train_idx])
        loss.backward()
        adam.step()
        if epoch % args.eval_every == 0:
            net.eval()
            with torch.no_grad():
                hits = net(features, edges).argmax(1) == labels
            print(f"epoch {epoch}: loss {loss.item():.3f}, train {hits[train_idx].float().mean():.1%}, "
                  f"test {hits[test_idx].float().mean():.1%}")


if __name__ == "__main__":
    main()
