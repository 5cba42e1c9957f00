"""Payments, payment events and refunds move to the ``payments`` app, shipments and returns to ``fulfilment``.

The rows stay: each table is renamed to its new app's name here, and the new apps' first migrations
create the models in Django's state only (``SeparateDatabaseAndState``), moving their content types
(and so the permissions staff hold on them) along.
"""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("orders", "0017_line_units"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[
                migrations.AlterModelTable(name="payment", table="payments_payment"),
                migrations.AlterModelTable(name="paymentevent", table="payments_paymentevent"),
                migrations.AlterModelTable(name="refund", table="payments_refund"),
                migrations.AlterModelTable(name="refundline", table="payments_refundline"),
                migrations.AlterModelTable(name="shipment", table="fulfilment_shipment"),
                migrations.AlterModelTable(name="shipmentline", table="fulfilment_shipmentline"),
                migrations.AlterModelTable(name="returnrequest", table="fulfilment_returnrequest"),
                migrations.AlterModelTable(name="returnline", table="fulfilment_returnline"),
            ],
            state_operations=[
                migrations.RemoveField(
                    model_name='payment',
                    name='order',
                ),
                migrations.RemoveField(
                    model_name='refund',
                    name='payment',
                ),
                migrations.DeleteModel(
                    name='PaymentEvent',
                ),
                migrations.RemoveField(
                    model_name='refund',
                    name='order',
                ),
                migrations.RemoveField(
                    model_name='refund',
                    name='requested_by',
                ),
                migrations.RemoveField(
                    model_name='returnrequest',
                    name='refund',
                ),
                migrations.RemoveField(
                    model_name='refundline',
                    name='refund',
                ),
                migrations.RemoveField(
                    model_name='refundline',
                    name='order_line',
                ),
                migrations.RemoveField(
                    model_name='returnline',
                    name='order_line',
                ),
                migrations.RemoveField(
                    model_name='returnline',
                    name='return_request',
                ),
                migrations.RemoveField(
                    model_name='returnrequest',
                    name='decided_by',
                ),
                migrations.RemoveField(
                    model_name='returnrequest',
                    name='order',
                ),
                migrations.RemoveField(
                    model_name='shipment',
                    name='order',
                ),
                migrations.RemoveField(
                    model_name='shipment',
                    name='shipped_by',
                ),
                migrations.RemoveField(
                    model_name='shipmentline',
                    name='shipment',
                ),
                migrations.RemoveField(
                    model_name='shipmentline',
                    name='order_line',
                ),
                migrations.DeleteModel(
                    name='Payment',
                ),
                migrations.DeleteModel(
                    name='Refund',
                ),
                migrations.DeleteModel(
                    name='RefundLine',
                ),
                migrations.DeleteModel(
                    name='ReturnLine',
                ),
                migrations.DeleteModel(
                    name='ReturnRequest',
                ),
                migrations.DeleteModel(
                    name='Shipment',
                ),
                migrations.DeleteModel(
                    name='ShipmentLine',
                ),
    
            ],
        ),
    ]
