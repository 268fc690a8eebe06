-- A small online shop: the database behind the seeds in this folder.
-- shop.sqlite is built from this file (see seeds/README.md); keep the two in sync.
-- Prices are integer cents; dates are ISO-8601 text (YYYY-MM-DD).

CREATE TABLE customers (
    customer_id  INTEGER PRIMARY KEY,
    name         TEXT NOT NULL,
    email        TEXT UNIQUE,                                  -- NULL when the customer gave none
    city         TEXT,                                         -- NULL when unknown
    country      TEXT NOT NULL,
    signup_date  TEXT NOT NULL,
    referred_by  INTEGER REFERENCES customers (customer_id)    -- NULL when not referred
);

CREATE TABLE products (
    product_id    INTEGER PRIMARY KEY,
    name          TEXT NOT NULL,
    category      TEXT NOT NULL,
    price_cents   INTEGER NOT NULL,                            -- current list price
    stock         INTEGER NOT NULL,
    discontinued  INTEGER NOT NULL DEFAULT 0 CHECK (discontinued IN (0, 1))
);

CREATE TABLE orders (
    order_id      INTEGER PRIMARY KEY,
    customer_id   INTEGER NOT NULL REFERENCES customers (customer_id),
    order_date    TEXT NOT NULL,
    status        TEXT NOT NULL CHECK (status IN ('pending', 'shipped', 'delivered', 'cancelled', 'returned')),
    shipped_date  TEXT                                         -- NULL until the order ships
);

CREATE TABLE order_items (
    order_id          INTEGER NOT NULL REFERENCES orders (order_id),
    product_id        INTEGER NOT NULL REFERENCES products (product_id),
    quantity          INTEGER NOT NULL CHECK (quantity > 0),
    unit_price_cents  INTEGER NOT NULL,                        -- price actually charged per unit
    PRIMARY KEY (order_id, product_id)
);

INSERT INTO customers (customer_id, name, email, city, country, signup_date, referred_by) VALUES
    (1,  'Alice Martin',     'alice.martin@example.com',  'London',     'United Kingdom', '2023-01-15', NULL),
    (2,  'Bruno Keller',     'bruno.keller@example.de',   'Berlin',     'Germany',        '2023-02-03', NULL),
    (3,  'Chloé Dubois',     'chloe.dubois@example.fr',   'Lyon',       'France',         '2023-03-22', 1),
    (4,  'Daniel Okafor',    NULL,                        'Manchester', 'United Kingdom', '2023-05-10', 1),
    (5,  'Eva Novak',        'eva.novak@example.cz',      'Prague',     'Czechia',        '2023-07-01', NULL),
    (6,  'Farah Haddad',     'farah.haddad@example.com',  NULL,         'France',         '2023-08-19', 3),
    (7,  'Gustav Lindqvist', 'gustav.l@example.se',       'Stockholm',  'Sweden',         '2023-11-05', NULL),
    (8,  'Hannah Schulz',    'hannah.schulz@example.de',  'Munich',     'Germany',        '2024-01-08', 2),
    (9,  'Ivan Petrov',      NULL,                        NULL,         'Germany',        '2024-02-14', NULL),
    (10, 'Julia Rossi',      'julia.rossi@example.it',    'Milan',      'Italy',          '2024-02-29', 1),
    (11, 'Kenji Watanabe',   'kenji.w@example.jp',        'Hamburg',    'Germany',        '2024-04-12', 8),
    (12, 'Laura Gómez',      'laura.gomez@example.es',    'Madrid',     'Spain',          '2024-06-30', NULL),
    (13, 'Mei Chen',         'mei.chen@example.ca',       'Vancouver',  'Canada',         '2024-07-01', 12);

INSERT INTO products (product_id, name, category, price_cents, stock, discontinued) VALUES
    (1,  'Chef''s Knife 20cm',                     'Kitchen',     4999,  12, 0),
    (2,  'Cast Iron Skillet',                      'Kitchen',     3450,   0, 0),
    (3,  'Bamboo Cutting Board',                   'Kitchen',     1899,  40, 0),
    (4,  'French Press 1L',                        'Kitchen',     2750,   7, 0),
    (5,  'Wireless Mouse',                         'Electronics', 2499,  55, 0),
    (6,  'Mechanical Keyboard',                    'Electronics', 8900,   9, 0),
    (7,  'USB-C Hub 7-in-1',                       'Electronics', 3999,   0, 0),
    (8,  'Noise-Cancelling Headphones',            'Electronics', 19900,  4, 0),
    (9,  'LED Desk Lamp',                          'Home Office', 3200,  18, 0),
    (10, 'Ergonomic Chair',                        'Home Office', 24900,  2, 0),
    (11, 'Monitor Stand',                          'Home Office', 4500,   0, 1),
    (12, 'The Pragmatic Programmer',               'Books',       4200,  15, 0),
    (13, 'Designing Data-Intensive Applications',  'Books',       4800,   6, 0),
    (14, 'SQL Pocket Guide',                       'Books',       1999,   0, 1),
    (15, 'Python Crash Course',                    'Books',       3500,  11, 0),
    (16, 'Laptop Sleeve 14 inch',                  'Electronics', 2200,  30, 0),
    (17, 'Espresso Cups (Set of 4)',               'Kitchen',     2400,  25, 0);

INSERT INTO orders (order_id, customer_id, order_date, status, shipped_date) VALUES
    (1001, 1,  '2023-09-04', 'delivered', '2023-09-05'),
    (1002, 2,  '2023-09-18', 'delivered', '2023-09-20'),
    (1003, 3,  '2023-10-02', 'delivered', '2023-10-06'),
    (1004, 1,  '2023-10-27', 'delivered', '2023-10-28'),
    (1005, 5,  '2023-11-11', 'cancelled', NULL),
    (1006, 2,  '2023-11-24', 'delivered', '2023-11-25'),
    (1007, 4,  '2023-12-01', 'delivered', '2023-12-05'),
    (1008, 7,  '2023-12-15', 'returned',  '2023-12-16'),
    (1009, 1,  '2023-12-20', 'delivered', '2023-12-21'),
    (1010, 3,  '2024-01-09', 'delivered', '2024-01-10'),
    (1011, 8,  '2024-01-22', 'delivered', '2024-01-29'),
    (1012, 2,  '2024-02-05', 'cancelled', NULL),
    (1013, 6,  '2024-02-17', 'delivered', '2024-02-19'),
    (1014, 1,  '2024-03-01', 'delivered', '2024-03-02'),
    (1015, 10, '2024-03-08', 'delivered', '2024-03-12'),
    (1016, 8,  '2024-03-19', 'returned',  '2024-03-20'),
    (1017, 5,  '2024-03-30', 'delivered', '2024-04-02'),
    (1018, 2,  '2024-04-11', 'delivered', '2024-04-12'),
    (1019, 11, '2024-04-25', 'delivered', '2024-04-26'),
    (1020, 3,  '2024-05-06', 'shipped',   '2024-05-07'),
    (1021, 1,  '2024-05-20', 'delivered', '2024-05-21'),
    (1022, 10, '2024-06-03', 'cancelled', NULL),
    (1023, 8,  '2024-06-14', 'delivered', '2024-06-18'),
    (1024, 12, '2024-06-30', 'shipped',   '2024-07-01'),
    (1025, 2,  '2024-07-02', 'shipped',   '2024-07-03'),
    (1026, 6,  '2024-07-05', 'pending',   NULL),
    (1027, 11, '2024-07-06', 'pending',   NULL),
    (1028, 1,  '2024-07-07', 'pending',   NULL);

INSERT INTO order_items (order_id, product_id, quantity, unit_price_cents) VALUES
    (1001, 12, 1, 4200),
    (1001, 5,  1, 2499),
    (1002, 6,  1, 8900),
    (1002, 5,  2, 2499),
    (1003, 1,  1, 4999),
    (1003, 3,  2, 1899),
    (1004, 13, 1, 4800),
    (1005, 8,  1, 19900),
    (1006, 9,  2, 3200),
    (1006, 14, 1, 1999),
    (1007, 10, 1, 22900),
    (1007, 11, 1, 4500),
    (1008, 8,  1, 19900),
    (1009, 4,  1, 2750),
    (1009, 3,  1, 1899),
    (1010, 15, 2, 3500),
    (1011, 7,  1, 3999),
    (1011, 5,  1, 2499),
    (1012, 6,  1, 8900),
    (1013, 2,  1, 3450),
    (1013, 4,  1, 2750),
    (1014, 12, 1, 4200),
    (1014, 13, 1, 4800),
    (1014, 15, 1, 3500),
    (1015, 1,  1, 4499),
    (1015, 2,  1, 3450),
    (1016, 10, 1, 24900),
    (1017, 14, 3, 1999),
    (1018, 8,  1, 17900),
    (1018, 7,  1, 3999),
    (1019, 9,  1, 3200),
    (1019, 5,  1, 2499),
    (1020, 6,  1, 8900),
    (1021, 3,  3, 1899),
    (1021, 1,  1, 4999),
    (1022, 12, 2, 4200),
    (1023, 13, 1, 4800),
    (1023, 9,  1, 3200),
    (1023, 5,  1, 2499),
    (1024, 8,  1, 19900),
    (1025, 11, 2, 4500),
    (1025, 9,  2, 3200),
    (1026, 15, 1, 3500),
    (1027, 7,  2, 3999),
    (1028, 2,  1, 3450),
    (1028, 3,  1, 1899);
