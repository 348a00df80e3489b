"""A claim's pairs and the claim as the report reads them: each pair's contrast, what its interval says of the paper's
effect, its power, its family-wise reading, whether its verdict keeps to the bootstrap's seed, and whether it counts
(a pair repeating another's models at this depth does not); a claim's verdict counts over the pairs that count."""

from __future__ import annotations

from dataclasses import dataclass

from bertlab.report import stats
from bertlab.report.multiboot import MultiContrast


@dataclass(frozen=True)
class Side:
    label: str  # the table row's label, or its `<encoder>-<mode>`
    key: str
    row: str  # `<encoder>-<mode>`: its cells are the runs `<task>-<row>-<pretraining seed>-<seed>`


@dataclass(frozen=True)
class Pair:
    """One contrast of a claim: the paper says A is better than B in `column`."""

    column: str
    a: Side
    b: Side
    contrast: stats.Contrast
    reason: str = ""  # why it was not measured
    missing: str = ""  # not measured because a side has no data (`collect.NO_DATA`) or was not run (`NOT_RUN`)
    bound: float | None = None  # a ratio pair's: B is `bound` times A's floor
    budget: str = ""  # the cells' fine-tuning budget (A's / B's where they differ)
    paper: float | None = None  # the paper's own A - B (None: it gives no comparable number)
    compressed: bool = False  # a side is at or below its floor
    seeds: tuple[int, int] = (1, 1)  # the fine-tuning runs of A's cell and of B's, all pretraining runs (ratio: B 1)
    pretrain_runs: tuple[int, int] = (1, 1)  # the pretraining runs A's cell and B's are over
    mde: float | None = None  # the smallest |A - B| the design detects with 80% power: z_sum x the draws' SD
    runs_needed: float | None = None  # pretraining runs a side the paper's effect needs (inf: none at this scale)
    power_note: str = ""  # the MDE and the runs in words: what they leave out or assume
    runs_edge: float | None = None  # on an edge of the item noise (see `power.Power.edge`): the fewest runs a side
    runs_range: tuple[float, float] | None = None  # the runs needed over run_var's interval and item_var's MC error
    unlimited: float | None = None  # the power to detect the paper's effect with unlimited runs a side
    holm_p: float | None = None  # the p-value adjusted by Holm within the pair's table; None outside the family
    familywise: str = ""  # the verdict read family-wise; "" outside a family (not measured, a ratio, a repeat)
    holm_edge: bool = False  # the family-wise reading changes within the p-values' Monte-Carlo error
    same_as: str = ""  # why the pair does not count: its sides are one model, or an earlier pair's models

    @property
    def counted(self) -> bool:
        """Whether the pair counts in the verdicts and the family: its sides are two models, not an earlier pair's."""
        return not self.same_as

    @property
    def paper_vs_mde(self) -> str | None:
        """Whether the paper's |A - B| is "above" the MDE (this design could have detected it) or "below"."""
        if self.paper is None or self.mde is None:
            return None
        return "above" if abs(self.paper) >= self.mde else "below"

    @property
    def run_margins(self) -> tuple[float, ...]:
        """Each pretraining run's own A - B (paired runs: run r of A less run r of B), where a side has several."""
        c = self.contrast
        if not isinstance(c, MultiContrast) or max(self.pretrain_runs) < 2 or not c.paired:
            return ()
        return tuple(a - b for a, b in zip(c.scores_a, c.scores_b))

    @property
    def edge(self) -> bool:
        """Whether an interval end lies within `multiboot.SETTLED_Z` Monte-Carlo errors of 0: the verdict may change
        with the bootstrap's seed."""
        c = self.contrast
        return isinstance(c, MultiContrast) and c.verdict != stats.NOT_MEASURED and not c.settled

    @property
    def ratio(self) -> bool:
        """Whether the contrast is A's perplexity over B's (B: `bound` times A's floor), not A - B."""
        return self.bound is not None

    @property
    def name(self) -> str:
        return f"{self.column}: {self.a.key} vs {self.b.key}"

    @property
    def paper_vs_interval(self) -> str | None:
        """Where the paper's A - B lies against our interval: "inside", "above", "below", or None."""
        return stats.against_paper(self.contrast, self.paper)

    @property
    def size(self) -> str | None:
        """The verdict on the paper's size (`stats.size_of`): it holds, it is ruled out, or None (no paper number)."""
        return stats.size_of(self.contrast, self.paper)

    @property
    def label(self) -> str:
        """The verdict on direction and size in a few words (`stats.label`)."""
        return stats.label(self.contrast, self.paper)

    @property
    def reading(self) -> str:
        """The verdict with what the interval says of the paper's effect, and the floor's compression."""
        return stats.reading(self.contrast, self.paper, self.compressed, self.unlimited)


@dataclass(frozen=True)
class Finding:
    """A claim of the paper and its pairs on our runs."""

    id: str
    table: str
    text: str
    pairs: tuple[Pair, ...]
    own: bool = False  # one of the project's own checks (a floor, vs scratch, a probe), not a claim of the paper

    @property
    def summary(self) -> str:
        """The one pair's verdict, the counts of each verdict over the pairs counted, or "not measured" with none
        run; and how many more pairs repeat a counted one's models."""
        if not self.pairs:
            return f"{stats.NOT_MEASURED} (not run)"
        counted = [p for p in self.pairs if p.counted]
        text = counted[0].label if len(self.pairs) == len(counted) == 1 else stats.summarize(
            [p.contrast for p in counted], [p.paper for p in counted])
        repeats = len(self.pairs) - len(counted)
        return text + (f"; {repeats} more repeating a counted pair's models, counted once" if repeats else "")
