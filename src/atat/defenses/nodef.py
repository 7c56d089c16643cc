"""NoDef: plain training of spec §1 (paper A.1)."""

from atat.defenses.base import Defense


class NoDefense(Defense):
    type_name = "nodef"
