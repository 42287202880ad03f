package postgres

import (
	"bytes"
	"context"
	"fmt"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/heraldgo/herald/internal/store"
)

// The WAL relay's stream: a replication connection (replication=database)
// streaming a slot with pgoutput's protocol 1, with messages, through a
// publication. It returns the transactions' begins and commits, their
// logical messages of the stream's prefix, and the server's keepalives;
// everything else pgoutput sends is skipped.

// Stream connects to p.DSN on a replication connection and starts streaming
// p.Slot from its confirmed position.
func (wal) Stream(ctx context.Context, p store.StreamParams) (store.WALStream, error) {
	cfg, err := pgconn.ParseConfig(p.DSN)
	if err != nil {
		return nil, fmt.Errorf("parse dsn: %w", err)
	}
	cfg.RuntimeParams["replication"] = "database"
	conn, err := pgconn.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("connect: %w", err)
	}
	err = pglogrepl.StartReplication(ctx, conn, p.Slot, 0, pglogrepl.StartReplicationOptions{
		PluginArgs: pgoutputArgs(p.Publication),
	})
	if err != nil {
		_ = conn.Close(context.WithoutCancel(ctx))
		return nil, fmt.Errorf("start replication: %w", err)
	}
	return &stream{conn: conn, prefix: p.Prefix}, nil
}

// pgoutputArgs are the START_REPLICATION options that stream the logical
// messages of transactions through publication: pgoutput's protocol 1, with
// messages.
func pgoutputArgs(publication string) []string {
	return []string{"proto_version '1'", "publication_names '" + publication + "'", "messages 'true'"}
}

// stream is a replication connection streaming a slot.
type stream struct {
	conn   *pgconn.PgConn
	prefix string
}

// Receive returns the next begin, commit, message of the stream's prefix or
// keepalive.
func (s *stream) Receive(ctx context.Context) (store.StreamItem, error) {
	for {
		raw, err := s.conn.ReceiveMessage(ctx)
		if err != nil {
			if pgconn.Timeout(err) {
				return store.StreamItem{}, fmt.Errorf("%w: %w", store.ErrReceiveTimeout, err)
			}
			return store.StreamItem{}, fmt.Errorf("receive: %w", err)
		}
		var data []byte
		switch m := raw.(type) {
		case *pgproto3.ErrorResponse:
			return store.StreamItem{}, fmt.Errorf("stream: %w", pgconn.ErrorResponseToPgError(m))
		case *pgproto3.CopyData:
			data = m.Data
		default:
			continue
		}
		if len(data) == 0 {
			continue
		}
		switch data[0] {
		case pglogrepl.PrimaryKeepaliveMessageByteID:
			k, err := pglogrepl.ParsePrimaryKeepaliveMessage(data[1:])
			if err != nil {
				return store.StreamItem{}, fmt.Errorf("keepalive: %w", err)
			}
			return store.StreamItem{Kind: store.StreamKeepalive, LSN: store.LSN(k.ServerWALEnd), ReplyRequested: k.ReplyRequested}, nil
		case pglogrepl.XLogDataByteID:
			x, err := pglogrepl.ParseXLogData(data[1:])
			if err != nil {
				return store.StreamItem{}, fmt.Errorf("xlog data: %w", err)
			}
			msg, err := pglogrepl.Parse(x.WALData)
			if err != nil {
				continue // a message pgoutput sends that pglogrepl does not parse: not Herald's
			}
			switch m := msg.(type) {
			case *pglogrepl.BeginMessage:
				return store.StreamItem{Kind: store.StreamBegin}, nil
			case *pglogrepl.CommitMessage:
				return store.StreamItem{Kind: store.StreamCommit, LSN: store.LSN(m.TransactionEndLSN)}, nil
			case *pglogrepl.LogicalDecodingMessage:
				if !m.Transactional || m.Prefix != s.prefix {
					continue
				}
				// Content was the connection's buffer, which the next receive reuses.
				return store.StreamItem{Kind: store.StreamMessage, LSN: store.LSN(m.LSN), Content: bytes.Clone(m.Content)}, nil
			}
		}
	}
}

// Report sends a standby status update: confirmed is written (and, to
// pgoutput, flushed and applied).
func (s *stream) Report(ctx context.Context, confirmed store.LSN) error {
	return pglogrepl.SendStandbyStatusUpdate(ctx, s.conn, pglogrepl.StandbyStatusUpdate{WALWritePosition: pglogrepl.LSN(confirmed)})
}

// Close closes the connection.
func (s *stream) Close(ctx context.Context) error { return s.conn.Close(ctx) }
