"""describe.flop_counter: PyTorch's FlopCounterMode counts a recurrent layer's fused kernel (cuDNN
on a GPU, the CPU's LSTM) as 0 flops; the products of such layers are added, and layers whose
products it did count (GRU and RNN on the CPU decompose into matmuls) are not counted twice."""

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from tools.worker.describe import flop_counter, rnn_flops

T, B, IN, H = 6, 3, 5, 7


def _products(gates: int, dirs: int, layers: int, rows: int, proj: int = 0) -> float:
    out = proj or H
    total = 0.0
    for layer in range(layers):
        width = IN if layer == 0 else dirs * out
        total += dirs * 2 * rows * gates * H * (width + out)
        if proj:
            total += dirs * 2 * rows * H * proj
    return total


class Net(torch.nn.Module):
    def __init__(self, rnn: torch.nn.Module) -> None:
        super().__init__()
        self.rnn = rnn
        self.fc = torch.nn.Linear(rnn.hidden_size * (2 if rnn.bidirectional else 1), 4)

    def forward(self, x):
        out, _ = self.rnn(x)
        return self.fc(out)


@pytest.mark.parametrize(("cls", "gates"), [(torch.nn.LSTM, 4), (torch.nn.GRU, 3), (torch.nn.RNN, 1)])
@pytest.mark.parametrize("bidirectional", [False, True])
def test_recurrent_products_counted_once(cls, gates, bidirectional):
    torch.manual_seed(0)
    net = Net(cls(IN, H, 2, batch_first=True, bidirectional=bidirectional))
    x = torch.randn(B, T, IN)
    dirs = 2 if bidirectional else 1
    with torch.no_grad(), flop_counter(net) as counted:
        net(x)
    linear = 2 * B * T * dirs * H * 4
    assert counted() == pytest.approx(_products(gates, dirs, 2, B * T) + linear)
    with torch.no_grad(), FlopCounterMode(display=False) as fc:
        net(x)
    # what PyTorch alone says (0 for the LSTM's fused kernel): the gap is what was added
    if cls is torch.nn.LSTM:
        assert fc.get_total_flops() == linear


def test_unbatched_packed_and_projected_inputs():
    lstm = torch.nn.LSTM(IN, H, 2, proj_size=3)
    assert rnn_flops(lstm, 4, torch.randn(T, IN)) == _products(4, 1, 2, T, proj=3)
    seqs = [torch.randn(n, IN) for n in (6, 4, 2)]
    packed = torch.nn.utils.rnn.pack_sequence(seqs)
    gru = torch.nn.GRU(IN, H)
    assert rnn_flops(gru, 3, packed) == _products(3, 1, 1, 12)
    assert rnn_flops(gru, 3, None) == 0.0


def test_hooks_removed_after_counting():
    net = Net(torch.nn.LSTM(IN, H, batch_first=True))
    with torch.no_grad(), flop_counter(net):
        net(torch.randn(B, T, IN))
    assert not net.rnn._forward_hooks and not net.rnn._forward_pre_hooks
