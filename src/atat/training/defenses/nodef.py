"""NoDef: plain training of docs/sources.md#training-recipe (paper A.1)."""

from atat.training.defenses.base import Defense


class NoDefense(Defense):
    type_name = "nodef"
