// checkout 101 202: reserve one of each product in one transaction, in cart order (the
// bug: two carts with the same products in opposite orders can deadlock, 40P01).
// checkout -sorted 202 101: the fix, every cart reserves in product_id order.
//
// The connection comes from DATABASE_URL (pgx also reads PGHOST, PGPORT, PGUSER,
// PGDATABASE and PGPASSFILE), as a pgxpool.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"sort"
	"strconv"

	"github.com/jackc/pgconn"
	"github.com/jackc/pgx/v4"
	"github.com/jackc/pgx/v4/pgxpool"
)

func reserve(ctx context.Context, db *pgxpool.Pool, productIDs []int) error {
	return db.BeginFunc(ctx, func(tx pgx.Tx) error {
		for _, id := range productIDs {
			tag, err := tx.Exec(ctx, `UPDATE inventory SET reserved = reserved + $1
				WHERE product_id = $2 AND available - reserved >= $1`, 1, id)
			if err != nil {
				return err
			}
			if tag.RowsAffected() == 0 {
				return fmt.Errorf("OUT_OF_STOCK:%d", id)
			}
		}
		return nil
	})
}

func run() error {
	sorted := flag.Bool("sorted", false, "reserve in product_id order (the fix)")
	flag.Parse()
	var ids []int
	for _, arg := range flag.Args() {
		id, err := strconv.Atoi(arg)
		if err != nil {
			return fmt.Errorf("usage: checkout [-sorted] PRODUCT_ID...")
		}
		ids = append(ids, id)
	}
	if *sorted {
		sort.Ints(ids)
	}
	ctx := context.Background()
	db, err := pgxpool.Connect(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		return err
	}
	defer db.Close()
	return reserve(ctx, db, ids)
}

func main() {
	if err := run(); err != nil {
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) {
			fmt.Fprintf(os.Stderr, "%s %s\n", pgErr.Code, pgErr.Message)
		} else {
			fmt.Fprintln(os.Stderr, err)
		}
		os.Exit(1)
	}
}
