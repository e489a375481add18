package org.s3io.spark;

import java.util.ArrayList;
import java.util.List;
import java.util.Locale;

import org.apache.spark.sql.connector.read.Scan;
import org.apache.spark.sql.connector.read.SupportsPushDownFilters;
import org.apache.spark.sql.connector.read.SupportsPushDownRequiredColumns;
import org.apache.spark.sql.execution.datasources.v2.python.PythonDataSourceV2;
import org.apache.spark.sql.sources.EqualNullSafe;
import org.apache.spark.sql.sources.EqualTo;
import org.apache.spark.sql.sources.Filter;
import org.apache.spark.sql.sources.GreaterThan;
import org.apache.spark.sql.sources.GreaterThanOrEqual;
import org.apache.spark.sql.sources.In;
import org.apache.spark.sql.sources.IsNotNull;
import org.apache.spark.sql.sources.IsNull;
import org.apache.spark.sql.sources.LessThan;
import org.apache.spark.sql.sources.LessThanOrEqual;
import org.apache.spark.sql.sources.Not;
import org.apache.spark.sql.sources.StringContains;
import org.apache.spark.sql.sources.StringEndsWith;
import org.apache.spark.sql.sources.StringStartsWith;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * Records the columns and filters Spark's optimizer asks for; the scan reads only those top-level columns and
 * hands the filters to the Python reader, which prunes partitions and row groups by them.
 *
 * <p>Every filter is also returned to Spark as a post-scan filter, so rows are always filtered by Spark exactly
 * (what the reader prunes by statistics never decides a result), and the filters' columns stay in the read
 * schema. Only the filter kinds PySpark's pushdown runner serializes are handed over; the rest stay with Spark.
 */
public class S3ParquetScanBuilder implements SupportsPushDownFilters, SupportsPushDownRequiredColumns {
  private final PythonDataSourceV2 source;
  private final String shortName;
  private final StructType schema;
  private final CaseInsensitiveStringMap options;
  private StructType readSchema;
  private Filter[] pushed = new Filter[0];

  public S3ParquetScanBuilder(
      PythonDataSourceV2 source, String shortName, StructType schema, CaseInsensitiveStringMap options) {
    this.source = source;
    this.shortName = shortName;
    this.schema = schema;
    this.options = options;
    this.readSchema = schema;
  }

  @Override
  public Filter[] pushFilters(Filter[] filters) {
    List<Filter> handed = new ArrayList<>();
    for (Filter filter : filters) {
      if (serializable(filter)) {
        handed.add(filter);
      }
    }
    pushed = handed.toArray(new Filter[0]);
    return filters;
  }

  @Override
  public Filter[] pushedFilters() {
    return pushed.clone();
  }

  /** The top-level columns of the source's schema that {@code required} names (whole structs, in schema order). */
  @Override
  public void pruneColumns(StructType required) {
    List<String> names = new ArrayList<>();
    for (StructField field : required.fields()) {
      names.add(field.name().toLowerCase(Locale.ROOT));
    }
    List<StructField> kept = new ArrayList<>();
    for (StructField field : schema.fields()) {
      if (names.contains(field.name().toLowerCase(Locale.ROOT))) {
        kept.add(field);
      }
    }
    readSchema = new StructType(kept.toArray(new StructField[0]));
  }

  @Override
  public Scan build() {
    return new S3ParquetScan(source, shortName, schema, readSchema, options, pushed);
  }

  /** Whether PySpark's filter pushdown runner can hand {@code filter} to a Python reader. */
  static boolean serializable(Filter filter) {
    Filter inner = filter instanceof Not ? ((Not) filter).child() : filter;
    return inner instanceof EqualTo
        || inner instanceof EqualNullSafe
        || inner instanceof GreaterThan
        || inner instanceof GreaterThanOrEqual
        || inner instanceof LessThan
        || inner instanceof LessThanOrEqual
        || inner instanceof In
        || inner instanceof IsNull
        || inner instanceof IsNotNull
        || inner instanceof StringStartsWith
        || inner instanceof StringEndsWith
        || inner instanceof StringContains;
  }
}
