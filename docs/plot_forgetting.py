"""Plot docs/forgetting.csv (from `mordant simulate --forgetting-study --curves ...`).

Usage: python docs/plot_forgetting.py [docs/forgetting.csv] [docs/forgetting.png]
Needs matplotlib (pip install matplotlib).
"""

import csv
import sys
from collections import defaultdict

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main() -> None:
    source = sys.argv[1] if len(sys.argv) > 1 else "docs/forgetting.csv"
    target = sys.argv[2] if len(sys.argv) > 2 else "docs/forgetting.png"
    curves = defaultdict(lambda: defaultdict(list))
    with open(source, newline="") as f:
        for row in csv.DictReader(f):
            c = curves[row["model"]]
            c["rows"].append(int(row["post_swap_rows"]))
            c["median"].append(float(row["median_de00"]))
            c["p90"].append(float(row["p90_de00"]))
            c["rmse"].append(float(row["concentration_rmse"]))

    fig, (top, bottom) = plt.subplots(2, 1, figsize=(9, 7), sharex=True)
    styles = {"no_forgetting": ("tab:red", "no forgetting")}
    for name, c in curves.items():
        colour, label = styles.get(
            name, ("tab:blue", name.replace("half_life_", "half-life ") + " rows")
        )
        top.plot(c["rows"], c["median"], color=colour, label=f"{label}: median")
        top.plot(c["rows"], c["p90"], color=colour, linestyle=":", label=f"{label}: 90th percentile")
        bottom.plot(c["rows"], c["rmse"], color=colour, label=label)
    for ax in (top, bottom):
        ax.axvline(0, color="black", linewidth=1)
        ax.grid(alpha=0.3)
    top.text(0, 0.03, " instrument swap", transform=top.get_xaxis_transform(), va="bottom")
    top.axhline(1.0, color="grey", linewidth=0.8, linestyle="--")
    top.set_ylabel("ΔE00 on held-out targets")
    top.set_yscale("log")
    top.legend(fontsize=8, loc="upper right")
    top.set_title("Recovery after an instrument swap (targets read by the instrument in use)")
    bottom.set_ylabel("concentration RMSE (% owf)")
    bottom.set_xlabel("rows learnt since the swap")
    bottom.legend(fontsize=8, loc="upper right")
    fig.tight_layout()
    fig.savefig(target, dpi=120)
    print(f"wrote {target}")


if __name__ == "__main__":
    main()
