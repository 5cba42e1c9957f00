# The line's returned units and each refund line's restocked units (``orders.units``), filled from the
# refunds already made: a refund with restock put all its units back, a live return's units came back.

from django.db import migrations, models
from django.db.models import OuterRef, Subquery, Sum


def fill(apps, schema_editor):
    OrderLine, Refund, RefundLine = (apps.get_model("orders", name) for name in ("OrderLine", "Refund", "RefundLine"))
    RefundLine.objects.filter(refund__in=Refund.objects.filter(restock=True)).update(
        quantity_restocked=models.F("quantity")
    )
    returns = Refund.objects.filter(source="return").exclude(state="failed")
    returned = (
        RefundLine.objects.filter(order_line=OuterRef("pk"), refund__in=returns)
        .order_by()
        .values("order_line")
        .annotate(units=Sum("quantity"))
        .values("units")
    )
    lines = set(RefundLine.objects.filter(refund__in=returns).values_list("order_line", flat=True))
    OrderLine.objects.filter(pk__in=sorted(lines)).update(quantity_returned=Subquery(returned))


class Migration(migrations.Migration):
    dependencies = [
        ("orders", "0016_payment_charged_amount"),
    ]

    operations = [
        migrations.AddField(
            model_name="orderline",
            name="quantity_returned",
            field=models.PositiveIntegerField(default=0),
        ),
        migrations.AddField(
            model_name="refundline",
            name="quantity_restocked",
            field=models.PositiveIntegerField(default=0),
        ),
        migrations.AddConstraint(
            model_name="refundline",
            constraint=models.CheckConstraint(
                condition=models.Q(("quantity_restocked__lte", models.F("quantity"))),
                name="refund_line_restocked_within_quantity",
            ),
        ),
        migrations.RunPython(fill, migrations.RunPython.noop),
    ]
