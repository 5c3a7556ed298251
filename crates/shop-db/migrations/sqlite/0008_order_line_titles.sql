-- An order's line keeps the item's title as it was bought, as it keeps its
-- price: a receipt says what was bought, whatever the item is called since.
-- Lines written before this have none; their order's page shows the title now.
ALTER TABLE order_lines ADD COLUMN title TEXT;
