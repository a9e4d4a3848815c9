// java Deposit 10: read the balance, add in Java, write the sum back (a lost update).
// java Deposit --locked 10: the same with SELECT ... FOR UPDATE in one transaction.
//
// The connection comes from JDBC_DATABASE_URL (pgjdbc reads neither PG* nor DATABASE_URL;
// the password, if any, from PGPASSFILE).
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;

public class Deposit {
    static int balance(Connection conn, String sql) throws SQLException {
        try (PreparedStatement read = conn.prepareStatement(sql)) {
            read.setInt(1, 1);
            try (ResultSet rs = read.executeQuery()) {
                rs.next();
                return rs.getInt("balance");
            }
        }
    }

    static void write(Connection conn, int balance) throws SQLException {
        try (PreparedStatement update =
                conn.prepareStatement("UPDATE accounts SET balance = ? WHERE id = ?")) {
            update.setInt(1, balance);
            update.setInt(2, 1);
            update.executeUpdate();
        }
    }

    static void depositReadComputeWrite(Connection conn, int amount) throws SQLException {
        int balance = balance(conn, "SELECT balance FROM accounts WHERE id = ?");
        write(conn, balance + amount);
    }

    static void depositLocked(Connection conn, int amount) throws SQLException {
        conn.setAutoCommit(false);
        try {
            int balance = balance(conn, "SELECT balance FROM accounts WHERE id = ? FOR UPDATE");
            write(conn, balance + amount);
            conn.commit();
        } catch (SQLException e) {
            conn.rollback();
            throw e;
        }
    }

    public static void main(String[] args) {
        boolean locked = args.length > 0 && args[0].equals("--locked");
        int amount = Integer.parseInt(args[args.length - 1]);
        try (Connection conn = DriverManager.getConnection(System.getenv("JDBC_DATABASE_URL"))) {
            if (locked) {
                depositLocked(conn, amount);
            } else {
                depositReadComputeWrite(conn, amount);
            }
        } catch (SQLException e) {
            System.err.println(e.getSQLState() + " " + e.getMessage());
            System.exit(1);
        }
    }
}
