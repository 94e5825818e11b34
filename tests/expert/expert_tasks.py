"""Small KernelBench-format tasks for the expert tests (beyond examples/), as source strings.

Each entry: name -> (source, CPU size overrides with odd, non-power-of-two sizes)."""

from __future__ import annotations

from pathlib import Path

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

ACT_ZOO = """
import torch
import torch.nn as nn
import torch.nn.functional as F

N = 1024
D = 1000


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.act = nn.Hardtanh(-2.0, 2.0)

    def forward(self, x):
        a = F.leaky_relu(x, 0.2) + F.gelu(x, approximate="tanh")
        b = F.silu(x) * F.mish(x) - F.softplus(x, beta=2.0)
        c = F.elu(x, alpha=0.5) + F.selu(x) + F.hardswish(x) + torch.sigmoid(x) * torch.tanh(x)
        d = self.act(x * 3.0) + F.relu6(x) + F.hardsigmoid(x) + F.softsign(x) + F.logsigmoid(x)
        return torch.clamp(a + b + c + d, min=-5.0) / 2.0 - 1.0


def get_inputs():
    return [torch.randn(N, D) * 3.0]


def get_init_inputs():
    return []
"""

CHANNEL_BIAS = """
import torch
import torch.nn as nn

B, C, H, W = 16, 64, 32, 32


class Model(nn.Module):
    def __init__(self, channels):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(channels, 1, 1))
        self.scale = nn.Parameter(torch.randn(1))

    def forward(self, x, y):
        return torch.relu(x * self.scale + self.bias) - y


def get_inputs():
    return [torch.randn(B, C, H, W), torch.randn(B, C, H, W)]


def get_init_inputs():
    return [C]
"""

SCALAR_ARG = """
import torch
import torch.nn as nn

N = 4096


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x, alpha: float):
        return torch.sigmoid(x) * alpha


def get_inputs():
    return [torch.randn(N, N), 0.75]


def get_init_inputs():
    return []
"""

SOFTMAX_PRO_EPI = """
import torch
import torch.nn as nn

B = 128
D = 4000


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.sm = nn.Softmax(dim=1)

    def forward(self, x):
        return self.sm(x * 0.5 - 1.0) * 10.0


def get_inputs():
    return [torch.randn(B, D)]


def get_init_inputs():
    return []
"""

MATMUL_TA = """
import torch
import torch.nn as nn

M, K, N = 1024, 4096, 2048


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A, B):
        return torch.matmul(A.T, B)


def get_inputs():
    return [torch.randn(K, M), torch.randn(K, N)]


def get_init_inputs():
    return []
"""

LINEAR_3D_NOBIAS = """
import torch
import torch.nn as nn
import torch.nn.functional as F

B, S, DIN, DOUT = 8, 256, 1024, 1024


class Model(nn.Module):
    def __init__(self, din, dout):
        super(Model, self).__init__()
        self.proj = nn.Linear(din, dout, bias=False)
        self.shift = nn.Parameter(torch.zeros(dout))

    def forward(self, x):
        return F.silu(self.proj(x) + self.shift)


def get_inputs():
    return [torch.randn(B, S, DIN)]


def get_init_inputs():
    return [DIN, DOUT]
"""

MATVEC = """
import torch
import torch.nn as nn

M, K = 8192, 8192


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A, v):
        return torch.matmul(A, v)


def get_inputs():
    return [torch.randn(M, K), torch.randn(K, 1)]


def get_init_inputs():
    return []
"""

UNSUPPORTED_SORT = """
import torch
import torch.nn as nn

N = 1024


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.sort(x, dim=-1)[0]


def get_inputs():
    return [torch.randn(N, N)]


def get_init_inputs():
    return []
"""

CASES: dict[str, tuple[str, dict[str, int]]] = {
    "gelu_chain": ((EXAMPLES / "gelu_chain.py").read_text(), {"BATCH": 7, "DIM": 33}),
    "softmax": ((EXAMPLES / "softmax.py").read_text(), {"BATCH": 5, "DIM": 37}),
    "softmax_long": ((EXAMPLES / "softmax.py").read_text(), {"BATCH": 3, "DIM": 20001}),
    "log_softmax_dim1": (
        (EXAMPLES / "log_softmax_dim1.py").read_text(),
        {"BATCH": 3, "CHANNELS": 19, "SPATIAL": 37},
    ),
    "linear_gelu": (
        (EXAMPLES / "linear_gelu.py").read_text(),
        {"BATCH": 19, "IN_FEATURES": 40, "OUT_FEATURES": 33},
    ),
    "bmm_residual": ((EXAMPLES / "bmm_residual.py").read_text(), {"BATCH": 2, "M": 19, "K": 40, "N": 23}),
    "act_zoo": (ACT_ZOO, {"N": 5, "D": 77}),
    "channel_bias": (CHANNEL_BIAS, {"B": 2, "C": 3, "H": 5, "W": 7}),
    "scalar_arg": (SCALAR_ARG, {"N": 13}),
    "softmax_pro_epi": (SOFTMAX_PRO_EPI, {"B": 3, "D": 41}),
    "matmul_ta": (MATMUL_TA, {"M": 21, "K": 35, "N": 17}),
    "linear_3d_nobias": (LINEAR_3D_NOBIAS, {"B": 2, "S": 5, "DIN": 24, "DOUT": 19}),
    "matvec": (MATVEC, {"M": 37, "K": 29}),
    "unsupported_sort": (UNSUPPORTED_SORT, {"N": 8}),
}

REDUCE_TEMPLATE = """
import torch
import torch.nn as nn

A, B, C = 16, 256, 256


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return {expr}


def get_inputs():
    return [torch.randn(A, B, C)]


def get_init_inputs():
    return []
"""

LOSS_MSE = """
import torch
import torch.nn as nn

N, D = 1024, 4096


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, predictions, targets):
        return torch.mean((predictions - targets) ** 2)


def get_inputs():
    return [torch.randn(N, D), torch.randn(N, D)]


def get_init_inputs():
    return []
"""

LOSS_SMOOTH_L1 = """
import torch
import torch.nn as nn
import torch.nn.functional as F

N, D = 1024, 4096


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, predictions, targets):
        return F.smooth_l1_loss(predictions, targets, beta=0.5) * 2.0


def get_inputs():
    return [torch.randn(N, D), torch.randn(N, D)]


def get_init_inputs():
    return []
"""

_RED = {"A": 3, "B": 37, "C": 29}
REDUCE_EXPRS = {
    "red_sum_last": "torch.sum(x, dim=-1)",
    "red_mean_mid_keep": "x.mean(dim=1, keepdim=True) * 2.0",
    "red_max_values": "torch.max(x, dim=2)[0]",
    "red_min_mid": "torch.min(x, dim=1).values",
    "red_argmax_last": "torch.argmax(x, dim=-1)",
    "red_argmin_mid": "torch.argmin(x, dim=1)",
    "red_prod_last": "torch.prod(x * 0.1 + 1.0, dim=2)",
    "red_lse_last": "torch.logsumexp(x, dim=-1)",
    "red_lse_mid": "torch.logsumexp(x, dim=1)",
    "red_amax_first": "torch.amax(x, dim=0)",
    "red_sum_all": "x.sum()",
    "red_sum_12": "torch.sum(torch.relu(x), dim=(1, 2))",
}
for _n, _e in REDUCE_EXPRS.items():
    CASES[_n] = (REDUCE_TEMPLATE.replace("{expr}", _e), dict(_RED))
CASES["red_sum_all_long"] = (
    REDUCE_TEMPLATE.replace("{expr}", "x.sum() / 3.0"),
    {"A": 3, "B": 101, "C": 1000},
)
CASES["loss_mse"] = (LOSS_MSE, {"N": 7, "D": 3001})
CASES["loss_smooth_l1"] = (LOSS_SMOOTH_L1, {"N": 5, "D": 77})

ROWNORM_TEMPLATE = """
import torch
import torch.nn as nn
import torch.nn.functional as F

B, S, D = 16, 128, 1024


class Model(nn.Module):
    def __init__(self, d):
        super().__init__()
        {init}

    def forward(self, x):
        return {expr}


def get_inputs():
    return [torch.randn(B, S, D) * 2.0 + 0.5]


def get_init_inputs():
    return [D]
"""

_RN = {"B": 2, "S": 3, "D": 37}
ROWNORM_CASES = {
    "rn_layernorm_module": ("self.ln = nn.LayerNorm(d, eps=1e-5)", "self.ln(x)"),
    "rn_rms_manual": (
        "self.eps = 1e-6",
        "x / torch.sqrt(torch.mean(x ** 2, dim=-1, keepdim=True) + self.eps)",
    ),
    "rn_l2_normalize": ("pass", "x / torch.norm(x, p=2, dim=-1, keepdim=True)"),
    "rn_standardize": (
        "pass",
        "(x - x.mean(-1, keepdim=True)) / torch.sqrt(x.var(-1, keepdim=True, unbiased=False) + 1e-5)",
    ),
    "rn_l1_relu": (
        "self.w = nn.Parameter(torch.randn(d))",
        "torch.relu(x / torch.sum(torch.abs(x), dim=-1, keepdim=True) * self.w)",
    ),
    "rn_rmsnorm_module": ("self.norm = nn.RMSNorm(d, eps=1e-6)", "self.norm(x) * 2.0"),
}
for _n, (_i, _e) in ROWNORM_CASES.items():
    CASES[_n] = (ROWNORM_TEMPLATE.replace("{init}", _i).replace("{expr}", _e), dict(_RN))
CASES["rn_layernorm_long"] = (
    ROWNORM_TEMPLATE.replace("{init}", ROWNORM_CASES["rn_layernorm_module"][0]).replace(
        "{expr}", "self.ln(x)"
    ),
    {"B": 2, "S": 2, "D": 17000},
)

FCONV = """
import torch
import torch.nn as nn
import torch.nn.functional as F

B, C, L = 8, 16, 128


class Model(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.w = nn.Parameter(torch.randn(c, c, 3) * 0.1)

    def forward(self, x):
        return F.gelu(F.conv1d(x, self.w, None, 1, 1)) - 0.25


def get_inputs():
    return [torch.randn(B, C, L)]


def get_init_inputs():
    return [C]
"""

CASES["conv_bias_relu"] = (
    (EXAMPLES / "conv_bias_relu.py").read_text(),
    {"BATCH": 2, "IN_CHANNELS": 3, "OUT_CHANNELS": 5, "HEIGHT": 9, "WIDTH": 7},
)
CASES["fconv1d_gelu"] = (FCONV, {"B": 2, "C": 3, "L": 11})

SCAN_TEMPLATE = """
import torch
import torch.nn as nn

A, B = 128, 4000


class Model(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.dim = dim

    def forward(self, x, mask):
        return {expr}


def get_inputs():
    return [torch.rand(A, B) + 0.5, torch.randint(0, 2, (A, B)).bool()]


def get_init_inputs():
    return [{dim}]
"""
SCAN_CASES = {
    "scan_cumsum_last": ("torch.cumsum(x, dim=self.dim)", 1),
    "scan_cumsum_first": ("torch.cumsum(x, dim=self.dim) * 0.5", 0),
    "scan_reverse": ("torch.cumsum(x.flip(self.dim), dim=self.dim).flip(self.dim)", 1),
    "scan_masked": ("torch.cumsum(x * mask, dim=self.dim)", 1),
    "scan_cumprod": ("torch.cumprod(x, dim=self.dim)", 1),
}
for _n, (_e, _d) in SCAN_CASES.items():
    CASES[_n] = (SCAN_TEMPLATE.replace("{expr}", _e).replace("{dim}", str(_d)), {"A": 5, "B": 37})
CASES["scan_cumsum_long"] = (
    SCAN_TEMPLATE.replace("{expr}", "torch.cumsum(x, dim=self.dim)").replace("{dim}", "1"),
    {"A": 3, "B": 2500},
)

SDPA = """
import torch
import torch.nn as nn
import torch.nn.functional as F

B, H, S, D = 4, 8, 512, 64


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, q, k, v):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)


def get_inputs():
    return [torch.randn(B, H, S, D) for _ in range(3)]


def get_init_inputs():
    return []
"""
CASES["attention"] = (
    (EXAMPLES / "attention.py").read_text(),
    {"BATCH": 2, "HEADS": 3, "SEQ": 37, "HEAD_DIM": 24},
)
CASES["sdpa_causal"] = (SDPA, {"B": 1, "H": 2, "S": 45, "D": 16})

BN_TEMPLATE = """
import torch
import torch.nn as nn

N, C, H, W = 16, 64, 64, 64


class Model(nn.Module):
    def __init__(self, c):
        super().__init__()
        {init}

    def forward(self, x):
        return {expr}


def get_inputs():
    return [torch.randn(N, C, H, W) * 3.0 + 1.0]


def get_init_inputs():
    return [C]
"""
BN_CASES = {
    "bn2d": (
        "self.bn = nn.BatchNorm2d(c)\n        nn.init.uniform_(self.bn.weight)\n        "
        "nn.init.uniform_(self.bn.bias)",
        "self.bn(x)",
    ),
    "conv_bn_relu": (
        "self.conv = nn.Conv2d(c, 8, 3)\n        self.bn = nn.BatchNorm2d(8, affine=False)",
        "torch.relu(self.bn(self.conv(x))) * 2.0",
    ),
}
for _n, (_i, _e) in BN_CASES.items():
    CASES[_n] = (BN_TEMPLATE.replace("{init}", _i).replace("{expr}", _e), {"N": 3, "C": 5, "H": 7, "W": 9})
CASES["bn2d_split"] = (
    BN_TEMPLATE.replace("{init}", BN_CASES["bn2d"][0]).replace("{expr}", "self.bn(x)"),
    {"N": 4, "C": 2, "H": 64, "W": 64},
)

XENT = """
import torch
import torch.nn as nn
import torch.nn.functional as F

N, C = 4096, 10


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, predictions, targets):
        return F.cross_entropy(predictions, targets)


def get_inputs():
    return [torch.randn(N, C) * 3.0, torch.randint(0, C, (N,))]


def get_init_inputs():
    return []
"""
XENT_MODULE = XENT.replace(
    "        super().__init__()\n",
    "        super().__init__()\n        self.loss = nn.CrossEntropyLoss(reduction='sum')\n",
).replace("return F.cross_entropy(predictions, targets)", "return self.loss(predictions, targets)")
CASES["xent"] = (XENT, {"N": 37, "C": 11})
CASES["xent_module_sum"] = (XENT_MODULE, {"N": 5, "C": 3000})

KLDIV = """
import torch
import torch.nn as nn
import torch.nn.functional as F

N, C = 4096, 4096


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, predictions, targets):
        return F.kl_div(torch.log(predictions), targets, reduction="batchmean")


def get_inputs():
    return [torch.randn(N, C).softmax(dim=-1), torch.randn(N, C).softmax(dim=-1)]


def get_init_inputs():
    return []
"""
CASES["loss_kldiv"] = (KLDIV, {"N": 7, "C": 300})
CASES["rn_instancenorm"] = (
    BN_TEMPLATE.replace("{init}", "self.inorm = nn.InstanceNorm2d(c)").replace(
        "{expr}", "torch.tanh(self.inorm(x))"
    ),
    {"N": 3, "C": 5, "H": 7, "W": 9},
)

POOL_TEMPLATE = """
import torch
import torch.nn as nn
import torch.nn.functional as F

N, C, D, H, W = 4, 8, 16, 32, 32


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        {init}

    def forward(self, x):
        return {expr}


def get_inputs():
    return [torch.randn({shape})]


def get_init_inputs():
    return []
"""
POOL_CASES = {
    "pool_max2d": (
        "self.pool = nn.MaxPool2d(3, stride=2, padding=1, dilation=2)",
        "self.pool(x)",
        "N, C, H, W",
    ),
    "pool_avg2d_nopad": (
        "pass",
        "F.avg_pool2d(x * 2.0, 3, 2, 1, count_include_pad=False) - 1.0",
        "N, C, H, W",
    ),
    "pool_avg1d": ("self.pool = nn.AvgPool1d(4, stride=3, padding=2)", "self.pool(x)", "N, C, W"),
    "pool_max3d": ("self.pool = nn.MaxPool3d(2)", "torch.relu(self.pool(x))", "N, C, D, H, W"),
}
for _n, (_i, _e, _s) in POOL_CASES.items():
    CASES[_n] = (
        POOL_TEMPLATE.replace("{init}", _i).replace("{expr}", _e).replace("{shape}", _s),
        {"N": 2, "C": 3, "D": 5, "H": 9, "W": 11},
    )

# Channels-last inputs (a library conv's output in a network): the pool reads and writes them in
# that layout (pool_cl_kernel); a per-channel epilogue tensor stays on that path.
POOL_CL_CASES = {
    "pool_cl_avg2d_nopad": (
        "pass",
        "F.avg_pool2d(x * 2.0, 3, 2, 1, count_include_pad=False) - 1.0",
        "N, C, H, W).to(memory_format=torch.channels_last",
    ),
    "pool_cl_max3d": (
        "self.pool = nn.MaxPool3d(2)",
        "torch.relu(self.pool(x))",
        "N, C, D, H, W).to(memory_format=torch.channels_last_3d",
    ),
}
for _n, (_i, _e, _s) in POOL_CL_CASES.items():
    CASES[_n] = (
        POOL_TEMPLATE.replace("{init}", _i).replace("{expr}", _e).replace("{shape}", _s),
        {"N": 2, "C": 3, "D": 5, "H": 9, "W": 11},
    )
CASES["pool_cl_max2d_bias"] = (
    POOL_TEMPLATE.replace("def __init__(self):", "def __init__(self, c):")
    .replace("{init}", "self.bias = nn.Parameter(torch.randn(c, 1, 1))")
    .replace("{expr}", "torch.relu(F.max_pool2d(x, 3, 2, 1)) + self.bias")
    .replace("{shape}", "N, C, H, W).to(memory_format=torch.channels_last")
    .replace("def get_init_inputs():\n    return []", "def get_init_inputs():\n    return [C]"),
    {"N": 2, "C": 3, "H": 9, "W": 11},
)

# A VGG-like block: conv + ReLU groups, a conv + ReLU + max pool group, a classifier. Its
# channels-last seed keeps every tensor between the groups channels-last, the pool included.
CASES["net_conv_pool"] = (
    """
import torch
import torch.nn as nn

N, C_IN, C, H, W, K = 2, 3, 8, 16, 16, 10


class Model(nn.Module):
    def __init__(self, c_in, c, k, flat):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(c_in, c, 3, padding=1), nn.ReLU(inplace=True),
            nn.Conv2d(c, c, 3, padding=1), nn.ReLU(inplace=True),
            nn.MaxPool2d(2, 2),
        )
        self.fc = nn.Linear(flat, k)

    def forward(self, x):
        return self.fc(torch.flatten(self.features(x), 1))


def get_inputs():
    return [torch.randn(N, C_IN, H, W)]


def get_init_inputs():
    return [C_IN, C, K, C * (H // 2) * (W // 2)]
""",
    {"N": 2, "H": 10, "W": 14},
)

# BatchNorm with non-trivial running statistics: training mode (the default in the runner) must use
# batch statistics, eval mode the running ones; the module decides at run time.
CASES["bn2d_running"] = (
    BN_TEMPLATE.replace(
        "{init}",
        BN_CASES["bn2d"][0] + "\n        self.bn.running_mean.uniform_(-1.0, 1.0)"
        "\n        self.bn.running_var.uniform_(0.5, 2.0)\n        self.bn.eps = 1e-3",
    ).replace("{expr}", "torch.relu(self.bn(x))"),
    {"N": 3, "C": 5, "H": 7, "W": 9},
)

BN_FUNCTIONAL = """
import torch
import torch.nn as nn
import torch.nn.functional as F

N, C, L = 16, 64, 100


class Model(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.weight = nn.Parameter(torch.rand(c) + 0.5)
        self.bias = nn.Parameter(torch.randn(c))
        self.register_buffer("running_mean", torch.randn(c))
        self.register_buffer("running_var", torch.rand(c) + 0.5)

    def forward(self, x):
        return F.batch_norm(x, self.running_mean, self.running_var, self.weight, self.bias,
                            training=False, eps=1e-4) * 0.5


def get_inputs():
    return [torch.randn(N, C, L) * 2.0]


def get_init_inputs():
    return [C]
"""
CASES["bn_functional_eval"] = (BN_FUNCTIONAL, {"N": 3, "C": 7, "L": 13})

MASKED_SOFTMAX = """
import torch
import torch.nn as nn

B, M, N = 4, 64, 128


class Model(nn.Module):
    def __init__(self, scale):
        super().__init__()
        self.scale = scale

    def forward(self, x, mask):
        return torch.softmax((x * self.scale).masked_fill(mask, float("-inf")), dim={dim})


def get_inputs():
    mask = torch.rand(B, M, N) < 0.4
    mask[:, 0, :] = False
    mask[..., 0] = False
    return [torch.randn(B, M, N), mask]


def get_init_inputs():
    return [0.7]
"""
CASES["softmax_masked"] = (MASKED_SOFTMAX.replace("{dim}", "-1"), {"B": 2, "M": 5, "N": 37})
CASES["softmax_masked_dim1"] = (MASKED_SOFTMAX.replace("{dim}", "1"), {"B": 2, "M": 11, "N": 6})
# masked_fill in a plain elementwise chain (bool mask loaded as an operand).
CASES["ew_masked_fill"] = (
    MASKED_SOFTMAX.replace(
        'torch.softmax((x * self.scale).masked_fill(mask, float("-inf")), dim={dim})',
        "torch.relu(x * self.scale).masked_fill(mask, -2.5) + 1.0",
    ),
    {"B": 3, "M": 5, "N": 37},
)

# Row norms over non-trailing dims ((outer, R, inner) rows) and over every dim (a 0-d statistic).
_MID = {
    "rn_mid_standardize": (
        "self.w = nn.Parameter(torch.randn(19, 1))",
        "(x - x.mean(1, keepdim=True)) / torch.sqrt(x.var(1, keepdim=True, unbiased=False) + 1e-5) * self.w",
    ),
    "rn_mid_rms_two_dims": ("pass", "x / torch.sqrt(torch.mean(x * x, dim=(0, 1), keepdim=True) + 1e-6)"),
    "rn_frobenius": ("pass", 'torch.relu(x / torch.norm(x, p="fro")) + 1.0'),
}
for _n, (_i, _e) in _MID.items():
    CASES[_n] = (ROWNORM_TEMPLATE.replace("{init}", _i).replace("{expr}", _e), {"B": 2, "S": 19, "D": 7})

GROUPNORM = """
import torch
import torch.nn as nn
import torch.nn.functional as F

N, C, H, W, G = 8, 64, 32, 32, 8


class Model(nn.Module):
    def __init__(self, g, c):
        super().__init__()
        {init}

    def forward(self, x):
        return {expr}


def get_inputs():
    return [torch.randn(N, C, H, W) * 2.0 + 0.7]


def get_init_inputs():
    return [G, C]
"""
CASES["gn_module"] = (
    GROUPNORM.replace(
        "{init}",
        "self.gn = nn.GroupNorm(g, c, eps=1e-4)\n        "
        "nn.init.uniform_(self.gn.weight, 0.5, 1.5)\n        "
        "nn.init.uniform_(self.gn.bias, -1.0, 1.0)",
    ).replace("{expr}", "self.gn(x)"),
    {"N": 3, "C": 6, "H": 5, "W": 7, "G": 3},
)
CASES["gn_functional_relu"] = (
    GROUPNORM.replace("{init}", "self.g = g").replace("{expr}", "torch.relu(F.group_norm(x, 2)) * 2.0"),
    {"N": 2, "C": 4, "H": 33, "W": 65, "G": 2},
)

# Exclusive cumsum written as a shifted cat (the idiom of the egg suite), along both dims.
_EXCL = "torch.cumsum(torch.cat([torch.zeros_like(x[:, :1]), x[:, :-1]], dim=1), dim=1)"
CASES["scan_exclusive_last"] = (
    SCAN_TEMPLATE.replace("{expr}", _EXCL).replace("{dim}", "1"),
    {"A": 3, "B": 2500},
)
CASES["scan_exclusive_first"] = (
    SCAN_TEMPLATE.replace(
        "{expr}", "torch.cumsum(torch.cat([torch.zeros_like(x[:1]), x[:-1]], dim=0), dim=0) * 2.0"
    ).replace("{dim}", "0"),
    {"A": 37, "B": 5},
)

ROWLOSS = """
import torch
import torch.nn as nn
import torch.nn.functional as F

A, B, D = 64, 8, 1024


class Model(nn.Module):
    def __init__(self, margin):
        super().__init__()
        {init}

    def forward(self, x, y, z):
        return {expr}


def get_inputs():
    return [torch.randn(A, B, D), torch.randn(A, B, D), torch.randn(A, B, D) * 0.5]


def get_init_inputs():
    return [0.75]
"""
_RL = {
    "rl_cosine_mean": ("pass", "torch.mean(1 - F.cosine_similarity(x, y, dim=-1))"),
    "rl_cosine_rows": ("pass", "F.cosine_similarity(x, y, dim=2, eps=1e-6) * 2.0"),
    "rl_triplet_module_sum": (
        "self.loss = nn.TripletMarginLoss(margin=margin, reduction='sum')",
        "self.loss(x, y, z)",
    ),
    "rl_triplet_functional": ("pass", "F.triplet_margin_loss(x, y, z, margin=0.3)"),
}
for _n, (_i, _e) in _RL.items():
    CASES[_n] = (ROWLOSS.replace("{init}", _i).replace("{expr}", _e), {"A": 3, "B": 5, "D": 1500})

LINEAR_BN = """
import torch
import torch.nn as nn
import torch.nn.functional as F

N, FIN, FOUT = 128, 256, 256


class Model(nn.Module):
    def __init__(self, fin, fout):
        super().__init__()
        self.fc = nn.Linear(fin, fout)
        self.bn = nn.BatchNorm1d(fout)
        self.bn.running_mean.uniform_(-0.5, 0.5)
        self.bn.running_var.uniform_(0.5, 2.0)

    def forward(self, x):
        return F.gelu(self.bn(self.fc(x)))


def get_inputs():
    return [torch.randn(N, FIN)]


def get_init_inputs():
    return [FIN, FOUT]
"""
CASES["linear_bn1d_gelu"] = (LINEAR_BN, {"N": 13, "FIN": 19, "FOUT": 11})

# Pooling of a library conv, with a per-channel bias tensor in the epilogue (mixed policy).
CASES["pool_conv_relu_bias"] = (
    POOL_TEMPLATE.replace(
        "{init}",
        "self.conv = nn.Conv2d(3, 5, 3)\n        self.pool = nn.MaxPool2d(2)\n"
        "        self.bias = nn.Parameter(torch.randn(5, 1, 1))",
    )
    .replace("{expr}", "self.pool(torch.relu(self.conv(x))) + self.bias")
    .replace("{shape}", "N, C, H, W"),
    {"N": 2, "C": 3, "D": 5, "H": 9, "W": 11},
)
# Rows wide enough (34 outputs) for row tiles, so the conv's bias goes through each kernel.
CASES["pool_conv_bias_rows"] = (
    POOL_TEMPLATE.replace("{init}", "self.conv = nn.Conv2d(3, 4, 3)\n        self.pool = nn.MaxPool2d(2)")
    .replace("{expr}", "self.pool(torch.relu(self.conv(x)))")
    .replace("{shape}", "N, C, H, W"),
    {"N": 1, "C": 3, "D": 5, "H": 6, "W": 70},
)
CASES["pool_avg2d_chscale"] = (
    POOL_TEMPLATE.replace("{init}", "self.s = nn.Parameter(torch.randn(3, 1, 1))")
    .replace("{expr}", "F.avg_pool2d(x, 2) * self.s")
    .replace("{shape}", "N, C, H, W"),
    {"N": 2, "C": 3, "D": 5, "H": 9, "W": 11},
)
