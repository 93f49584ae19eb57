"""Usage and budgets: what turns use, per tenant and user, and the budgets that cap it."""

from shelfhand.usage.budgets import BudgetLimits, BudgetPolicy, LocalBudgetBook, TurnMeter

__all__ = ["BudgetLimits", "BudgetPolicy", "LocalBudgetBook", "TurnMeter"]
