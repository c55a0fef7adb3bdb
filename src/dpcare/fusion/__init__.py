"""FusionDP (Zeng et al.): impute private features from public ones, then train hybrid objectives."""

from dpcare.fusion.imputers import (
    GradientBoostingImputer,
    Imputer,
    TabPFNImputer,
    imputation_quality,
    make_imputer,
)

__all__ = ["GradientBoostingImputer", "Imputer", "TabPFNImputer", "imputation_quality", "make_imputer"]
