from django.db import models


class OversellDemoGoods(models.Model):
    """A bare stock row for ``manage.py oversell_demo``: no CHECK constraints, no service, no ledger.

    It stands in for the background articles' ``Inventory`` table, so their designs can be run as
    they wrote them, side by side with the service.
    """

    stocks = models.IntegerField()
    version = models.PositiveIntegerField(default=0)

    class Meta:
        ordering = ["id"]

    def __str__(self):
        return f"demo goods {self.pk}: {self.stocks} in stock"
