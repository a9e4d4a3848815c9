// deposit 10: read the balance, add in Go, write the sum back (a lost update).
// deposit -locked 10: the same with SELECT ... FOR UPDATE in one transaction.
//
// The connection comes from DATABASE_URL (pgx also reads PGHOST, PGPORT, PGUSER,
// PGDATABASE and PGPASSFILE), as a pgxpool.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strconv"

	"github.com/jackc/pgx/v4"
	"github.com/jackc/pgx/v4/pgxpool"
)

func depositReadComputeWrite(ctx context.Context, db *pgxpool.Pool, amount int) error {
	var balance int
	if err := db.QueryRow(ctx, "SELECT balance FROM accounts WHERE id = $1", 1).Scan(&balance); err != nil {
		return err
	}
	_, err := db.Exec(ctx, "UPDATE accounts SET balance = $1 WHERE id = $2", balance+amount, 1)
	return err
}

func depositLocked(ctx context.Context, db *pgxpool.Pool, amount int) error {
	return db.BeginFunc(ctx, func(tx pgx.Tx) error {
		var balance int
		err := tx.QueryRow(ctx, "SELECT balance FROM accounts WHERE id = $1 FOR UPDATE", 1).Scan(&balance)
		if err != nil {
			return err
		}
		_, err = tx.Exec(ctx, "UPDATE accounts SET balance = $1 WHERE id = $2", balance+amount, 1)
		return err
	})
}

func run() error {
	locked := flag.Bool("locked", false, "read the balance FOR UPDATE in one transaction")
	flag.Parse()
	amount, err := strconv.Atoi(flag.Arg(0))
	if err != nil {
		return fmt.Errorf("usage: deposit [-locked] AMOUNT")
	}
	ctx := context.Background()
	db, err := pgxpool.Connect(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		return err
	}
	defer db.Close()
	if *locked {
		return depositLocked(ctx, db, amount)
	}
	return depositReadComputeWrite(ctx, db, amount)
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
